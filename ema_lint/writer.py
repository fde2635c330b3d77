"""Writing fixed files so that a crash or a full disk never leaves a half-written file, and
the file keeps what the user had.

The new text goes to a temporary file in the same folder, is flushed to disk, takes the
original's owner, group and permission bits, and replaces the original with one atomic
rename. A symbolic link is written through: its target gets the new text and the link
stays a link. What a rename cannot keep is refused with a message instead of written: a
file with several hard links (the rename would split them), a file whose owner or group
this user cannot give the copy, and a file that changed on disk since it was read (an
edit saved while ``--fix`` ran is never overwritten). A run killed between writing and
renaming leaves a ``.<name>.<random>.ema-lint.tmp``; ``remove_stale_temps`` removes those
once no writer can still be using them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

TEMP_SUFFIX = ".ema-lint.tmp"
_TEMP = re.compile(r"\.(.+)\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX) + r"\Z")
STALE_SECONDS = 3600.0  # no write takes this long: an older temporary file was orphaned


class WriteRefused(OSError):
    """The fix was not written, for a reason given in ``strerror``; the file is unchanged."""

    def __init__(self, reason: str, path: Path, code: int = errno.EPERM) -> None:
        super().__init__(code, reason, str(path))


def _current(path: Path) -> bytes | None:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read() if stat.S_ISREG(os.fstat(fd).st_mode) else None


def atomic_write(path: Path, data: bytes, expected: bytes | None = None) -> None:
    """Replace ``path``'s content with ``data`` atomically, keeping its owner, group and
    mode; ``expected``: what the file held when read (if it holds anything else now, the
    fix is refused rather than written over the user's edit)."""
    path = Path(os.path.realpath(path))
    original = os.stat(path)
    if not stat.S_ISREG(original.st_mode):
        raise WriteRefused("not a regular file", path)
    # A rename would replace even a read-only file: respect the mode (also as root).
    if not original.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(
        path, os.W_OK
    ):
        raise PermissionError(13, "the file is read-only", str(path))
    if original.st_nlink > 1:
        raise WriteRefused(
            f"it has {original.st_nlink} hard links, which replacing it would split", path
        )
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            _keep_owner(handle.fileno(), original, path)
        os.chmod(temp, stat.S_IMODE(original.st_mode))  # after chown, which may clear bits
        if expected is not None and _current(path) != expected:
            raise WriteRefused(
                "it changed on disk while it was being fixed (run again to fix the new text)",
                path,
                errno.EAGAIN,
            )
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _keep_owner(fd: int, original: os.stat_result, path: Path) -> None:
    if not hasattr(os, "fchown"):  # pragma: no cover - Windows: no owners to keep
        return
    made = os.fstat(fd)
    if (made.st_uid, made.st_gid) == (original.st_uid, original.st_gid):
        return
    try:
        os.fchown(fd, original.st_uid, original.st_gid)
    except PermissionError:
        raise WriteRefused(
            "replacing it would change its owner or group, which this user cannot keep", path
        ) from None


def remove_stale_temps(folders: Iterable[Path], now: float | None = None) -> None:
    """Remove the temporary files a killed ``--fix`` left in ``folders``: only names this
    module makes, only regular files (never a link), only once older than any write."""
    limit = (time.time() if now is None else now) - STALE_SECONDS
    for folder in folders:
        try:
            with os.scandir(folder) as entries:
                stale = [
                    e.path
                    for e in entries
                    if e.name.endswith(TEMP_SUFFIX)
                    and _TEMP.match(e.name)
                    and e.is_file(follow_symlinks=False)
                    and e.stat(follow_symlinks=False).st_mtime < limit
                ]
        except OSError:
            continue
        for path in stale:
            with contextlib.suppress(OSError):
                os.unlink(path)
