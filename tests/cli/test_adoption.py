"""Adoption on an existing codebase: --add-noqa, --show-fixes, --output-file, full and
json-lines output, clean, --show-settings, and the GitHub Action."""

from __future__ import annotations

import json
from pathlib import Path

from tests.samples import BAD

MULTI = """\
from timm.utils import ModelEmaV2

ema = ModelEmaV2(  # keep this comment
    model,
    decay=0.99,
)
ema2 = ModelEmaV2(model, decay=0.99)  # noqa: EMA102\r
ema3 = ModelEmaV2(model, decay=0.99)  # noqa
"""


def test_add_noqa_is_idempotent_and_keeps_comments(run, project: Path) -> None:
    path = project / "train.py"
    path.write_bytes(MULTI.encode())
    result = run("--add-noqa", "train.py", cwd=project)
    assert result.code == 0 and "Added 2 noqa directives." in result.err
    text = path.read_bytes().decode()
    assert "ema = ModelEmaV2(  # keep this comment  # noqa: EMA101\n" in text
    assert "ema2 = ModelEmaV2(model, decay=0.99)  # noqa: EMA102, EMA101\r\n" in text
    assert "ema3 = ModelEmaV2(model, decay=0.99)  # noqa\n" in text
    assert run("train.py", cwd=project).code == 0
    again = run("--add-noqa", "train.py", cwd=project)
    assert "Added 0 noqa directives." in again.err
    assert path.read_bytes().decode() == text


def test_show_fixes_lists_available_and_applied_fixes(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    shown = run("--show-fixes", "train.py", cwd=project)
    assert "Fixes available:" in shown.out and "EMA101 [unsafe] Set the decay to 0.999" in shown.out
    fixed = run("--fix", "--unsafe-fixes", "--show-fixes", "train.py", cwd=project)
    assert "train.py: 1 fix applied" in fixed.out


def test_output_file_gets_the_report(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("--output-format", "json", "-o", "report.json", "train.py", cwd=project)
    assert result.code == 1 and result.out == ""
    document = json.loads((project / "report.json").read_text())
    assert document["diagnostics"][0]["code"] == "EMA101"


def test_full_format_shows_source_caret_and_fix_diff(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    out = run("--output-format", "full", "--unsafe-fixes", "train.py", cwd=project).out
    assert "3 | ema = ModelEmaV2(model, decay=0.99)\n" in out
    assert "  |                               ^^^^\n" in out
    assert "  - ema = ModelEmaV2(model, decay=0.99)\n" in out
    assert "  + ema = ModelEmaV2(model, decay=0.999)\n" in out


def test_json_lines_is_one_object_per_finding(run, project: Path) -> None:
    (project / "train.py").write_text(BAD + "ema2 = ModelEmaV2(model, decay=0.99)\n")
    out = run("--output-format", "json-lines", "train.py", cwd=project).out
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["location"]["line"] for r in rows] == [3, 4]


def test_clean_removes_the_cache(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    run("train.py", cwd=project)
    assert (project / ".ema_lint_cache").is_dir()
    result = run("clean", cwd=project)
    assert result.code == 0 and not (project / ".ema_lint_cache").exists()


def test_show_settings_for_one_file(run, project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.ema-lint]\nignore = ["EMA104"]\n')
    (project / "train.py").write_text(BAD)
    result = run("--show-settings", "train.py", cwd=project)
    document = json.loads(result.out)
    assert result.code == 0
    assert document["configuration"] == str(project / "pyproject.toml")
    assert "EMA101" in document["rules"] and "EMA104" not in document["rules"]
    assert run("--show-settings", "a.py", "b.py", cwd=project).code == 2


def test_github_action_installs_ema_lint_and_uploads_sarif() -> None:
    yaml = __import__("yaml")
    root = Path(__file__).resolve().parents[2]
    action = yaml.safe_load((root / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "pip install" in runs and "--output-format sarif" in runs
    uploads = [
        s for s in steps if str(s.get("uses", "")).startswith("github/codeql-action/upload-sarif")
    ]
    assert uploads and uploads[0]["with"]["sarif_file"]


def test_unused_noqa_is_off_by_default_and_its_fix_removes_the_comment(run, project: Path) -> None:
    path = project / "train.py"
    path.write_text(
        "from timm.utils import ModelEmaV2\n\n"
        "ema = ModelEmaV2(model, decay=0.9998)  # noqa: EMA101\n"
        "ema2 = ModelEmaV2(model, decay=0.99)  # noqa: EMA101\n"
        "# noqa: EMA101\n"
    )
    assert run("train.py", cwd=project).code == 0
    found = run("--extend-select", "EMA910", "train.py", cwd=project)
    assert "train.py:3:40: EMA910 [*] Unused noqa for EMA101" in found.out
    assert "train.py:5:1: EMA910 Unused noqa for EMA101" in found.out  # own line: no fix
    assert ":4:" not in found.out
    run("--extend-select", "EMA910", "--fix", "train.py", cwd=project)
    assert path.read_text().splitlines()[2:] == [
        "ema = ModelEmaV2(model, decay=0.9998)",
        "ema2 = ModelEmaV2(model, decay=0.99)  # noqa: EMA101",
        "# noqa: EMA101",
    ]


def test_add_noqa_then_unused_noqa_round_trip(run, project: Path) -> None:
    """Adopt with --add-noqa, fix the code, and EMA910 removes the stale comment."""
    path = project / "train.py"
    path.write_text(BAD)
    run("--add-noqa", "train.py", cwd=project)
    assert "# noqa: EMA101" in path.read_text()
    path.write_text(path.read_text().replace("0.99)", "0.9998)"))
    run("--extend-select", "EMA910", "--fix", "train.py", cwd=project)
    assert path.read_text() == BAD.replace("0.99)", "0.9998)")
