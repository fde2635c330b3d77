"""Paths that are not plain readable files: reported in one line, and the run goes on.

Covered elsewhere: an unreadable directory and a missing path (tests/cli/test_check.py), a
read-only file under ``--fix`` (``test_read_only_file_under_fix_is_reported``).
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest

from ema_lint.config import Settings
from ema_lint.discovery import discover
from tests.samples import BAD

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")


def test_unreadable_file_is_reported_and_the_rest_goes_on(run, project: Path, monkeypatch) -> None:
    (project / "locked.py").write_text(BAD)
    (project / "train.py").write_text(BAD)
    real_open = builtins.open

    def guarded_open(file, *args, **kwargs):
        if str(file).endswith("locked.py"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", guarded_open)
    result = run(".", cwd=project)
    assert result.code == 2
    assert "locked.py: cannot read: Permission denied" in result.out
    assert "train.py:3:31: EMA101" in result.out
    assert "Traceback" not in result.out + result.err


@needs_symlinks
def test_symlink_loops_do_not_trap_the_walk(run, project: Path) -> None:
    pkg = project / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text(BAD)
    (pkg / "up").symlink_to("..")  # a folder loop
    (pkg / "self").symlink_to(".")
    (project / "a.py").symlink_to("b.py")  # a file loop
    (project / "b.py").symlink_to("a.py")
    (project / "gone.py").symlink_to("nowhere.py")  # a broken link
    result = run(".", cwd=project)
    assert result.code == 2
    assert result.out.count("EMA101") == 1  # pkg/train.py, once
    errors = [line for line in result.out.splitlines() if line.startswith("error:")]
    assert sorted(errors) == [
        "error: a.py: cannot read: Too many levels of symbolic links",
        "error: b.py: cannot read: Too many levels of symbolic links",
        "error: gone.py: cannot read: No such file or directory",
    ]
    named = run("a.py", "pkg/train.py", cwd=project)
    assert named.code == 2 and "a.py: not a file or directory" in named.out
    assert "pkg/train.py:3:31: EMA101" in named.out


@needs_symlinks
def test_a_file_reached_through_a_link_is_checked_once_under_its_own_name(
    run, project: Path
) -> None:
    (project / "real").mkdir()
    (project / "real" / "train.py").write_text(BAD)
    (project / "alias.py").symlink_to("real/train.py")
    (project / "linked").symlink_to("real", target_is_directory=True)
    result = run(".", "--output-format", "concise", cwd=project)
    assert result.out.count("EMA101") == 1
    assert "real/train.py:3:31: EMA101" in result.out


@needs_symlinks
def test_fix_through_a_symlink_writes_the_target_and_keeps_the_link(run, project: Path) -> None:
    (project / "real.py").write_text(BAD)
    link = project / "link.py"
    link.symlink_to("real.py")
    result = run("--fix", "--unsafe-fixes", "link.py", cwd=project)
    assert result.code == 0, result.out
    assert link.is_symlink() and os.readlink(link) == "real.py"
    assert "decay=0.999)" in (project / "real.py").read_text()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_fifo_named_like_a_python_file_is_not_read_when_walking(project: Path) -> None:
    (project / "train.py").write_text(BAD)
    os.mkfifo(project / "pipe.py")  # reading it would block the run forever
    os.chdir(project)
    found = discover([Path(".")], Settings())
    assert [p.name for p in found.files] == ["train.py"]
    assert found.errors == []


def test_a_directory_named_like_a_python_file_is_walked_not_read(run, project: Path) -> None:
    (project / "weird.py").mkdir()
    (project / "weird.py" / "train.py").write_text(BAD)
    result = run(".", cwd=project)
    assert result.code == 1
    assert "weird.py/train.py:3:31: EMA101" in result.out
