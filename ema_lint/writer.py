"""Writing fixed files so that a crash or a full disk never leaves a half-written file.

The new text goes to a temporary file in the same folder, is flushed to disk, takes the
original's permission bits, and replaces the original with one atomic rename. A symbolic
link is written through: its target gets the new text and the link stays a link.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data`` atomically, keeping its mode."""
    path = Path(os.path.realpath(path))
    original = os.stat(path)
    # A rename would replace even a read-only file: respect the mode (also as root).
    if not original.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(
        path, os.W_OK
    ):
        raise PermissionError(13, "the file is read-only", str(path))
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".ema-lint.tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, stat.S_IMODE(original.st_mode))
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
