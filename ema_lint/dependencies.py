"""The other files a lint of one file read (the project's modules it imports or is called
from), with their content hashes: the results cache stores them with the findings, and a
stored result counts only while each of them is unchanged. Imports no libcst: the warm path
checks dependencies with a stat and, when the stat changed, a hash."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

from .analysis.project.admission import IMPORTERS, importers_unchanged, refreshed_key

_READ: dict[str, dict[str, str]] = {}
_DIGESTS: dict[str, tuple[tuple[int, int], str | None]] = {}
MAX_RECORDS = 1024


def record(path: str, used: Mapping[str, str]) -> None:
    """What the lint of ``path`` read besides it (path -> content hash)."""
    key = os.path.abspath(path)
    _READ.pop(key, None)
    while len(_READ) >= MAX_RECORDS:  # front ends that never take them (flake8, the API)
        del _READ[next(iter(_READ))]
    _READ[key] = dict(used)


def take(path: str) -> dict[str, str]:
    """The files recorded for ``path`` (once: the next lint records afresh)."""
    return _READ.pop(os.path.abspath(path), {})


def digest(path: str) -> str | None:
    """The content hash of a file now (None: gone or unreadable), memoized by stat."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    signature = (st.st_mtime_ns, st.st_size)
    known = _DIGESTS.get(path)
    if known is not None and known[0] == signature:
        return known[1]
    try:
        with open(path, "rb") as handle:
            found: str | None = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        found = None
    _DIGESTS[path] = (signature, found)
    return found


def unchanged(used: Mapping[str, str]) -> bool:
    """Every file read is as it was, and no file that may import one of the modules whose
    callers were read has changed since (``admission.importers_key``)."""
    markers = []
    for path, value in used.items():
        if path.startswith(IMPORTERS):
            markers.append(path)
        elif digest(path) != value:
            return False
    return all(importers_unchanged(marker) for marker in markers)


def refreshed(used: Mapping[str, str]) -> dict[str, str] | None:
    """``used`` (found unchanged) with its importers keys made anew, when checking them
    had to read files changed since they were made; None when there is nothing to renew."""
    fresh: dict[str, str] | None = None
    for path in used:
        if path.startswith(IMPORTERS):
            new = refreshed_key(path)
            if new is not None:
                fresh = fresh if fresh is not None else dict(used)
                del fresh[path]
                fresh[new] = ""
    return fresh
