"""Writing fixes: all or nothing, and nothing at all for a file that does not change.

tests/cli/test_check.py covers the mode of a fixed file (0o751), an untouched clean file and
a read-only file; these add failures in the middle of a write, more modes, and files with
findings but nothing to write.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

import pytest

from ema_lint import writer
from tests.samples import BAD, GOOD


def _leftovers(folder: Path) -> list[str]:
    """Files a write left behind (temporary copies); the result cache is expected."""
    expected = ("pyproject.toml", "train.py", ".ema_lint_cache")
    return sorted(p.name for p in folder.iterdir() if p.name not in expected)


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("replace", OSError(errno.EXDEV, "Invalid cross-device link")),
        ("fsync", OSError(errno.ENOSPC, "No space left on device")),
        ("chmod", PermissionError(errno.EPERM, "Operation not permitted")),
        ("mkstemp", PermissionError(errno.EACCES, "Permission denied")),
    ],
)
def test_a_failed_write_leaves_the_original_intact_and_no_temp_file(
    run, project: Path, monkeypatch, where: str, error: OSError
) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    path.chmod(0o640)
    target = tempfile if where == "mkstemp" else os

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(target, where, fail)
    result = run("--fix", "--unsafe-fixes", "train.py", cwd=project)
    assert result.code == 2
    assert f"train.py: cannot write the fix: {error.strerror}" in result.out
    # Reported as it stands in the file, since nothing was written.
    assert "train.py:3:31: EMA101" in result.out
    assert path.read_text() == BAD
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert _leftovers(project) == []


def test_an_interrupt_between_writing_and_renaming(run, project: Path, monkeypatch) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    written: list[bytes] = []

    def interrupted(source, destination):
        written.append(Path(source).read_bytes())  # the new text is complete on disk here
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    result = run("--fix", "--unsafe-fixes", "train.py", cwd=project)
    assert result.code == 130 and "interrupted" in result.err
    assert written == [BAD.replace("0.99)", "0.999)").encode()]
    assert path.read_text() == BAD
    assert _leftovers(project) == []


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o755, 0o2775])
def test_a_fixed_file_keeps_its_mode(project: Path, mode: int) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    path.chmod(mode)
    writer.atomic_write(path, GOOD.encode())
    assert path.read_text() == GOOD
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert _leftovers(project) == []


@pytest.mark.parametrize(
    "args",
    [
        ("--fix",),  # the only fix is unsafe
        ("--fix", "--unsafe-fixes", "--select", "EMA9"),  # nothing selected that fixes
        ("--diff", "--unsafe-fixes"),  # shows the fix, writes nothing
    ],
    ids=["unsafe-fix-only", "no-rule", "diff"],
)
def test_a_file_with_nothing_to_write_is_not_touched(run, project: Path, args) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    stamp = path.stat().st_mtime_ns - 10**9
    os.utime(path, ns=(stamp, stamp))
    inode = path.stat().st_ino
    run(*args, "train.py", cwd=project)
    assert path.read_text() == BAD
    assert path.stat().st_mtime_ns == stamp
    assert path.stat().st_ino == inode
    assert _leftovers(project) == []
