"""A run that checked nothing, or met an error, never ends with a success line."""

from __future__ import annotations

from pathlib import Path

from tests.samples import GOOD


def test_missing_path_is_an_error_and_no_success(run, project: Path) -> None:
    (project / "train.py").write_text(GOOD)
    result = run("train.py", "missing.py", cwd=project)
    assert result.code == 2
    assert "missing.py: no such file or directory" in result.out
    assert "All checks passed!" not in result.out + result.err


def test_mistyped_subcommand_is_a_usage_error(run, project: Path) -> None:
    result = run("chek", cwd=project)
    assert result.code == 2
    assert "unknown command 'chek' (did you mean 'check'?)" in result.err
    assert "All checks passed!" not in result.out + result.err


def test_a_file_named_like_a_command_is_still_checked(run, project: Path) -> None:
    (project / "chek").write_text(GOOD)
    assert "unknown command" not in run("chek", cwd=project).err


def test_folder_without_sources_says_nothing_was_checked(run, project: Path) -> None:
    (project / "empty").mkdir()
    (project / "empty" / "notes.txt").write_text("x")
    result = run("empty", cwd=project)
    assert result.code == 0
    assert "No files checked" in result.out
    assert "All checks passed!" not in result.out


def test_fix_run_with_an_error_is_no_success(run, project: Path) -> None:
    result = run("--fix", "missing.py", cwd=project)
    assert result.code == 2
    assert "All checks passed!" not in result.out
