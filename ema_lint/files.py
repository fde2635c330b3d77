"""Reading files without ever waiting on one: a FIFO, a device or a socket named like a
Python file (in a linted tree, or in a folder the project model scans for importers)
is an error, not a hang."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def _nonblocking(path: str, flags: int) -> int:
    # Opening a FIFO for reading blocks until a writer comes: never wait for one.
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0))


def read_regular(path: str | Path) -> bytes:
    """A file's bytes; anything but a regular file (a FIFO, ``/dev/zero``) is an OSError."""
    with open(path, "rb", opener=_nonblocking) as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return handle.read()
