"""The check command: output, exit codes, selection, noqa, stdin, --diff, --fix."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from tests.samples import BAD, GOOD


def test_findings_exit_1_with_summary(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("train.py", cwd=project)
    assert result.code == 1
    assert "train.py:3:31: EMA101 " in result.out
    assert "averages over about 100 updates (half-life 69)" in result.out
    assert "Found 1 problem." in result.out
    assert "1 more fix available with --unsafe-fixes." in result.out


def test_clean_exit_0(run, project: Path) -> None:
    (project / "train.py").write_text(GOOD)
    result = run("check", "train.py", cwd=project)
    assert result.code == 0
    assert "All checks passed!" in result.out


def test_default_path_is_current_directory(run, project: Path) -> None:
    (project / "pkg").mkdir()
    (project / "pkg" / "train.py").write_text(BAD)
    assert run(cwd=project).code == 1


def test_exit_zero_and_quiet(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("--exit-zero", "--quiet", "train.py", cwd=project)
    assert result.code == 0
    assert "Found" not in result.out
    assert "EMA101" in result.out


def test_unsafe_fix_marker_and_fix(run, project: Path) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    shown = run("--unsafe-fixes", "train.py", cwd=project)
    assert "EMA101 [*]" in shown.out
    assert "(1 fixable with --fix)" in shown.out
    # Safe --fix does not apply an unsafe fix.
    assert run("--fix", "train.py", cwd=project).code == 1
    assert path.read_text() == BAD
    fixed = run("--fix", "--unsafe-fixes", "train.py", cwd=project)
    assert fixed.code == 0, fixed.out
    assert "decay=0.999)" in path.read_text()
    assert "1 fixed, 0 remaining" in fixed.out


def test_select_ignore_and_names(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    assert run("--ignore", "EMA101", "train.py", cwd=project).code == 0
    assert run("--ignore", "ema-decay-out-of-range", "train.py", cwd=project).code == 0
    assert run("--ignore", "EMA1", "train.py", cwd=project).code == 0
    assert run("--select", "EMA9", "train.py", cwd=project).code == 0
    assert run("--select", "ema-decay-out-of-range", "train.py", cwd=project).code == 1
    bad = run("--select", "EMA777", "train.py", cwd=project)
    assert bad.code == 2 and "EMA777" in bad.err


def test_cli_select_wins_over_config_ignore(run, project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.ema-lint]\nignore = ["EMA101"]\n')
    (project / "train.py").write_text(BAD)
    assert run("train.py", cwd=project).code == 0
    assert run("--select", "EMA101", "train.py", cwd=project).code == 1
    assert run("--extend-select", "EMA101", "train.py", cwd=project).code == 1


def test_rule_option_on_the_command_line(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    assert run("--option", "ema-decay-out-of-range.min=0.98", "train.py", cwd=project).code == 0
    assert run("--option", "EMA101.min=0.98", "train.py", cwd=project).code == 0
    wrong = run("--option", "EMA101.min=high", "train.py", cwd=project)
    assert wrong.code == 2 and "min" in wrong.err
    unknown = run("--option", "EMA101.nope=1", "train.py", cwd=project)
    assert unknown.code == 2 and "nope" in unknown.err


def test_noqa_and_disable_noqa(run, project: Path) -> None:
    (project / "train.py").write_text(BAD.replace("0.99)", "0.99)  # noqa: EMA101"))
    assert run("train.py", cwd=project).code == 0
    assert run("--disable-noqa", "train.py", cwd=project).code == 1
    (project / "other.py").write_text(BAD.replace("0.99)", "0.99)  # noqa: EMA2"))
    assert run("other.py", cwd=project).code == 1


def test_file_level_noqa(run, project: Path) -> None:
    (project / "train.py").write_text("# ema-lint: noqa\n" + BAD)
    assert run("train.py", cwd=project).code == 0


def test_noqa_on_first_line_of_statement(run, project: Path) -> None:
    source = (
        "from timm.utils import ModelEmaV2\n\n"
        "ema = ModelEmaV2(  # noqa: EMA101\n    model,\n    decay=0.99,\n)\n"
    )
    (project / "train.py").write_text(source)
    assert run("train.py", cwd=project).code == 0


def test_json_output(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("--output-format", "json", "--unsafe-fixes", "train.py", cwd=project)
    document = json.loads(result.out)
    assert document["version"] == 1
    [d] = document["diagnostics"]
    assert d["code"] == "EMA101" and d["name"] == "ema-decay-out-of-range"
    assert d["location"] == {"line": 3, "column": 31}
    assert d["end_location"] == {"line": 3, "column": 35}
    assert d["fix"]["applicability"] == "unsafe"
    [edit] = d["fix"]["edits"]
    assert edit["content"] == "9" and edit["location"] == {"line": 3, "column": 35}
    assert document["summary"]["problems"] == 1


def test_statistics(run, project: Path) -> None:
    (project / "a.py").write_text(BAD)
    (project / "b.py").write_text(BAD)
    result = run("--statistics", ".", cwd=project)
    assert "    2\tEMA101\t[ ] ema-decay-out-of-range" in result.out
    assert result.code == 1


def test_color(run, project: Path, monkeypatch) -> None:
    (project / "train.py").write_text(BAD)
    assert "\033[" in run("--color", "always", "train.py", cwd=project).out
    assert "\033[" not in run("train.py", cwd=project).out
    monkeypatch.setenv("NO_COLOR", "1")
    assert "\033[" not in run("--color", "auto", "train.py", cwd=project).out


def test_diff_writes_nothing(run, project: Path) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    result = run("--diff", "--unsafe-fixes", "train.py", cwd=project)
    assert result.code == 1
    assert "-ema = ModelEmaV2(model, decay=0.99)" in result.out
    assert "+ema = ModelEmaV2(model, decay=0.999)" in result.out
    assert "Would fix 1 problem." in result.err
    assert path.read_text() == BAD
    assert run("--diff", "train.py", cwd=project).code == 0  # no safe fix to show


def test_stdin(run, project: Path) -> None:
    result = run("-", "--stdin-filename", "train.py", stdin=BAD.encode(), cwd=project)
    assert result.code == 1
    assert "train.py:3:31: EMA101" in result.out
    anonymous = run("-", stdin=BAD.encode(), cwd=project)
    assert "-:3:31: EMA101" in anonymous.out


def test_stdin_fix_prints_the_fixed_source(run, project: Path) -> None:
    result = run("--fix", "--unsafe-fixes", "-", stdin=BAD.encode(), cwd=project)
    assert result.code == 0
    assert result.out == BAD.replace("0.99)", "0.999)")


def test_stdin_that_is_not_text(run, project: Path) -> None:
    result = run("-", stdin=b"\x00\xff\xfe timm.ModelEmaV2 \x00", cwd=project)
    assert result.code == 1
    assert "EMA901" in result.out


def test_missing_path_is_an_error_and_the_rest_goes_on(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("nope.py", "train.py", cwd=project)
    assert result.code == 2
    assert "nope.py: no such file or directory" in result.out
    assert "EMA101" in result.out


def test_syntax_error_is_ema901_and_the_rest_goes_on(run, project: Path) -> None:
    (project / "broken.py").write_text("from timm.utils import ModelEmaV2\nema = ModelEmaV2(\n")
    (project / "train.py").write_text(BAD)
    result = run(".", cwd=project)
    assert result.code == 1
    assert "broken.py:2:17: EMA901 cannot parse: '(' was never closed" in result.out
    assert "train.py:3:31: EMA101" in result.out


def test_invalid_encoding_is_ema901(run, project: Path) -> None:
    (project / "latin.py").write_bytes(b"# timm ModelEmaV2\nx = '\xe9'\n")
    result = run("latin.py", cwd=project)
    assert "latin.py:2:6: EMA901 cannot decode as utf-8" in result.out


def test_unreadable_directory_is_reported(run, project: Path, monkeypatch) -> None:
    locked = project / "locked"
    locked.mkdir()
    (locked / "x.py").write_text(BAD)
    (project / "train.py").write_text(BAD)
    real_scandir = os.scandir

    def scandir(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = run(".", cwd=project)
    assert result.code == 2
    assert "locked: cannot read directory: Permission denied" in result.out
    assert "train.py:3:31: EMA101" in result.out


def test_default_excludes_and_extend_exclude(run, project: Path) -> None:
    for folder in (".venv", "build", "site-packages", "generated"):
        (project / folder).mkdir()
        (project / folder / "train.py").write_text(BAD)
    result = run(".", "--extend-exclude", "generated", cwd=project)
    assert result.code == 0, result.out
    assert run(".", cwd=project).code == 1  # generated/ is not excluded by default
    # Paths named on the command line are checked even if excluded...
    assert run("build/train.py", cwd=project).code == 1
    # ...unless --force-exclude (what the pre-commit hooks use).
    assert run("--force-exclude", "build/train.py", cwd=project).code == 0


def test_fix_keeps_mode_line_endings_and_leaves_other_files_alone(run, project: Path) -> None:
    crlf = project / "crlf.py"
    crlf.write_bytes(BAD.replace("\n", "\r\n").encode())
    crlf.chmod(0o751)
    clean = project / "clean.py"
    clean.write_text(GOOD)
    before = clean.stat().st_mtime_ns
    os.utime(clean, ns=(before - 10**9, before - 10**9))
    before = clean.stat().st_mtime_ns
    result = run("--fix", "--unsafe-fixes", ".", cwd=project)
    assert result.code == 0
    assert crlf.read_bytes() == BAD.replace("0.99)", "0.999)").replace("\n", "\r\n").encode()
    assert stat.S_IMODE(crlf.stat().st_mode) == 0o751
    assert clean.stat().st_mtime_ns == before
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


def test_read_only_file_under_fix_is_reported(run, project: Path) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    path.chmod(0o444)
    result = run("--fix", "--unsafe-fixes", "train.py", cwd=project)
    assert result.code == 2
    assert "cannot write the fix" in result.out
    assert "EMA101" in result.out
    assert path.read_text() == BAD


def test_exit_non_zero_on_fix(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    result = run("--fix", "--unsafe-fixes", "--exit-non-zero-on-fix", "train.py", cwd=project)
    assert result.code == 1


def test_unknown_output_format_is_a_usage_error(run, project: Path) -> None:
    result = run("--output-format", "yaml", cwd=project)
    assert result.code == 2 and "yaml" in result.err


def test_version(run, capsys) -> None:
    import pytest

    from ema_lint import __version__

    with pytest.raises(SystemExit) as exit_info:
        run("--version")
    assert exit_info.value.code == 0
    assert __version__ in capsys.readouterr().out
