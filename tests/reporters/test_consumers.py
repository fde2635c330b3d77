"""Reports as the tools that consume them read them: schemas, parsers, file lines."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ema_lint.diagnostics import Diagnostic, Position
from ema_lint.reporters import RunResult, junit
from tests.samples import BAD
from tests.sources.notebooks import code, dumps, markdown, notebook

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text("utf-8")
)


def _validate_sarif(document: dict) -> None:
    cls = jsonschema.validators.validator_for(SCHEMA)
    # Format checking on: "uri" needs rfc3986-validator (a test extra).
    assert "uri" in cls.FORMAT_CHECKER.checkers
    validator = cls(SCHEMA, format_checker=cls.FORMAT_CHECKER)
    errors = list(validator.iter_errors(document))
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors[:5]]


def _notebook(project: Path) -> Path:
    cells = [
        markdown("# Training"),
        code(["from timm.utils import ModelEmaV2\n", "\n", "x = 1\n"]),
        code(["y = 2\n", "ema = ModelEmaV2(model, decay=0.99)\n"]),
    ]
    path = project / "train.ipynb"
    path.write_text(dumps(notebook(*cells)))
    return path


def _file_line(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(needle)


def test_sarif_uri_is_percent_encoded_and_valid_with_format_checking(run, project: Path) -> None:
    folder = project / "my dir #1"
    folder.mkdir()
    (folder / "train 100%.py").write_text(BAD)
    document = json.loads(run("--output-format", "sarif", ".", cwd=project).out)
    _validate_sarif(document)
    location = document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "my%20dir%20%231/train%20100%25.py"


def test_notebook_findings_carry_the_ipynb_file_lines(run, project: Path) -> None:
    path = _notebook(project)
    expected = _file_line(path, "decay=0.99")
    sarif = json.loads(run("--output-format", "sarif", "train.ipynb", cwd=project).out)
    _validate_sarif(sarif)
    region = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": expected, "endLine": expected}
    github = run("--output-format", "github", "train.ipynb", cwd=project).out
    assert f"file=train.ipynb,line={expected},endLine={expected},title=EMA101" in github
    (issue,) = json.loads(run("--output-format", "gitlab", "train.ipynb", cwd=project).out)
    assert issue["location"] == {
        "path": "train.ipynb",
        "lines": {"begin": expected, "end": expected},
    }


def test_github_and_gitlab_paths_are_relative_to_the_repository(
    run, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.delenv("CI_PROJECT_DIR", raising=False)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "pkg").mkdir()
    (project / "pkg" / "train.py").write_text(BAD)
    github = run("--output-format", "github", "train.py", cwd=project / "pkg").out
    assert github.startswith("::error file=pkg/train.py,")
    (issue,) = json.loads(run("--output-format", "gitlab", "train.py", cwd=project / "pkg").out)
    assert issue["location"]["path"] == "pkg/train.py"
    monkeypatch.setenv("GITHUB_WORKSPACE", str(project / "pkg"))
    assert run("--output-format", "github", "train.py").out.startswith("::error file=train.py,")


def test_github_annotation_without_columns_on_a_multi_line_range(run, project: Path) -> None:
    from ema_lint.reporters import github

    d = Diagnostic("EMA101", "ema-decay-out-of-range", "m", "a.py", Position(2, 5), Position(4, 1))
    stream = __import__("io").StringIO()
    github.render(RunResult(diagnostics=[d]), stream, False)
    assert stream.getvalue().startswith("::error file=a.py,line=2,endLine=4,title=EMA101")


def test_junit_with_control_characters_parses() -> None:
    d = Diagnostic(
        "EMA101",
        "ema-decay-out-of-range",
        "decay 'a\x1b[31m\x00b'",
        "a.py",
        Position(1, 1),
        Position(1, 2),
    )
    stream = __import__("io").StringIO()
    junit.render(RunResult(diagnostics=[d], errors=["bad\x07path"]), stream, False)
    root = ET.fromstring(stream.getvalue())
    failure = root.find(".//failure")
    assert failure is not None and "\\x1b[31m\\x00b" in failure.get("message", "")


def test_text_output_escapes_terminal_sequences_from_source(run, project: Path) -> None:
    # A raw ESC and a raw newline inside a triple-quoted key, quoted by the message's "from".
    key = '"""k\x1b[31m\nfake.py:1:1: EMA999"""'
    (project / "train.py").write_text(
        "from timm.utils import ModelEmaV2\n\n"
        f"DECAY = {{{key}: 0.99}}\n"
        f"ema = ModelEmaV2(model, decay=DECAY[{key}])\n"
    )
    for output_format in ("text", "concise", "grouped", "full"):
        out = run("--output-format", output_format, "train.py", cwd=project).out
        assert "EMA101" in out
        assert "\x1b" not in out, output_format
        assert not any(line.lstrip().startswith("fake.py") for line in out.splitlines())
        assert "k\\x1b[31m\\nfake.py" in out


def test_statistics_honour_json(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    out = run("--statistics", "--output-format", "json", "train.py", cwd=project).out
    document = json.loads(out)
    assert document["statistics"] == [
        {"code": "EMA101", "name": "ema-decay-out-of-range", "count": 1, "fixable": False}
    ]


def test_repeated_select_accumulates(run, project: Path) -> None:
    (project / "train.py").write_text(
        BAD + "import torch\nema_model = torch.optim.swa_utils.AveragedModel(model)\n"
    )
    one = run(
        "--select", "EMA101", "--select", "EMA4", "--output-format", "json", "train.py", cwd=project
    )
    codes = {d["code"] for d in json.loads(one.out)["diagnostics"]}
    assert "EMA101" in codes
    only = run("--select", "EMA4", "--output-format", "json", "train.py", cwd=project)
    assert "EMA101" not in {d["code"] for d in json.loads(only.out)["diagnostics"]}


def test_stdin_filename_honours_force_exclude(run, project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.ema-lint]\nextend-exclude = ["gen"]\n')
    args = ("--force-exclude", "--stdin-filename", "gen/train.py", "-")
    result = run(*args, stdin=BAD.encode(), cwd=project)
    assert result.code == 0 and "EMA101" not in result.out
    fixed = run("--fix", *args, stdin=BAD.encode(), cwd=project)
    assert fixed.out == BAD
    assert "EMA101" in run("--stdin-filename", "gen/train.py", "-", stdin=BAD.encode()).out
