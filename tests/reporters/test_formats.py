"""The other output formats: GitHub annotations, GitLab code quality, JUnit, grouped, JSON."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from ema_lint.diagnostics import Diagnostic, Position
from ema_lint.reporters import RunResult, github, gitlab, renderers
from tests.samples import BAD, GOOD

TWO = BAD + "ema2 = ModelEmaV2(model, decay=0.99)\n"


def test_every_documented_format_is_available() -> None:
    assert list(renderers()) == [
        "text",
        "concise",
        "full",
        "grouped",
        "json",
        "json-lines",
        "sarif",
        "github",
        "gitlab",
        "junit",
    ]


def test_github_annotation_has_the_documented_shape(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("--output-format", "github", "train.py", cwd=project)
    assert result.code == 1
    (d,) = json.loads(run("--output-format", "json", "train.py", cwd=project).out)["diagnostics"]
    assert result.out.splitlines() == [
        "::error file=train.py,line=3,col=31,endLine=3,endColumn=35,"
        f"title=EMA101 (ema-decay-out-of-range)::{github.escape_data(d['message'])}"
    ]
    assert d["message"].startswith("EMA decay 0.99 averages over about 100 updates")


def test_github_escaping_follows_the_actions_toolkit() -> None:
    assert github.escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert github.escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    d = Diagnostic(
        "EMA101",
        "ema-decay-out-of-range",
        "line one\nline: two, 5%",
        "dir,x/a:b.py",
        Position(1, 2),
        Position(1, 3),
    )
    out = _render(github.render, RunResult(diagnostics=[d], errors=["bad\nthing"]))
    assert out.splitlines() == [
        "::error file=dir%2Cx/a%3Ab.py,line=1,col=2,endLine=1,endColumn=3,"
        "title=EMA101 (ema-decay-out-of-range)::line one%0Aline: two, 5%25",
        "::error title=ema-lint::bad%0Athing",
    ]


def _render(renderer, result: RunResult) -> str:
    import io

    stream = io.StringIO()
    renderer(result, stream, False)
    return stream.getvalue()


def test_gitlab_report_fingerprints_are_unique_and_survive_line_shifts(run, project: Path) -> None:
    (project / "train.py").write_text(TWO)
    first = json.loads(run("--output-format", "gitlab", "train.py", cwd=project).out)
    assert len(first) == 2
    assert len({issue["fingerprint"] for issue in first}) == 2
    assert first[0]["location"] == {
        "path": "train.py",
        "positions": {"begin": {"line": 3, "column": 31}, "end": {"line": 3, "column": 35}},
    }
    assert first[0]["check_name"] == "EMA101 ema-decay-out-of-range"
    assert first[0]["severity"] == "major"
    (project / "train.py").write_text("# a new first line\n" + TWO)
    shifted = json.loads(run("--output-format", "gitlab", "train.py", cwd=project).out)
    assert [i["fingerprint"] for i in shifted] == [i["fingerprint"] for i in first]
    assert shifted[0]["location"]["positions"]["begin"]["line"] == 4


def test_gitlab_fingerprint_depends_on_the_finding() -> None:
    a = Diagnostic("EMA101", "n", "decay 0.99", "a.py", Position(1, 1), Position(1, 2))
    b = Diagnostic("EMA101", "n", "decay 0.9", "a.py", Position(1, 1), Position(1, 2))
    assert gitlab.fingerprint(a, 0) != gitlab.fingerprint(b, 0)
    assert gitlab.fingerprint(a, 0) != gitlab.fingerprint(a, 1)


def test_junit_report(run, project: Path) -> None:
    (project / "train.py").write_text(TWO)
    (project / "good.py").write_text(GOOD)
    root = ET.fromstring(run("--output-format", "junit", ".", cwd=project).out)
    assert root.tag == "testsuites" and root.get("failures") == "2"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "train.py"
    failures = suite.findall("testcase/failure")
    assert [f.get("type") for f in failures] == ["EMA101", "EMA101"]
    assert failures[0].text.startswith("train.py:3:31: EMA101 EMA decay 0.99")


def test_junit_report_without_findings_is_one_passing_case(run, project: Path) -> None:
    (project / "good.py").write_text(GOOD)
    result = run("--output-format", "junit", ".", cwd=project)
    assert result.code == 0
    root = ET.fromstring(result.out)
    assert root.get("tests") == "1" and root.get("failures") == "0"
    assert root.find("testsuite/testcase/failure") is None


def test_grouped_output_lists_findings_under_each_file(run, project: Path) -> None:
    (project / "train.py").write_text(TWO)
    result = run("--output-format", "grouped", "train.py", cwd=project)
    lines = result.out.splitlines()
    assert lines[0] == "train.py:"
    assert lines[1].startswith("  3:31 EMA101 EMA decay 0.99")
    assert lines[2].startswith("  4:32 EMA101 EMA decay 0.99")
    assert lines[-2] == "Found 2 problems."


def test_json_document_has_a_version_and_notes(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    document = json.loads(run("--output-format", "json", "train.py", cwd=project).out)
    assert document["version"] == 1
    assert document["notes"] == []
    assert set(document) == {
        "version",
        "ema_lint_version",
        "diagnostics",
        "errors",
        "notes",
        "summary",
    }
    (d,) = document["diagnostics"]
    assert d["cell"] is None and d["location"] == {"line": 3, "column": 31}
    assert d["url"].endswith("/rules/EMA101/")
