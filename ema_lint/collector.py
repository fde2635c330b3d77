"""The cyclic garbage collector's schedule for a batch run.

A parse makes hundreds of thousands of nodes at once (without collections: see
``analysis.syntax.parsing``), and with Python's default thresholds (700, 10, 10) the
collector then walks each tree in every generation it is promoted through, and the whole
heap of trees and summaries in each full collection: measured on a corpus of 1,961 files,
3.5 s of a 30 s run. With a larger young generation and rare older collections it walks
each tree about once (0.7 s). Trees hold no cycles; the cycles an analysis makes are
collected when the middle generation is (every hundred young collections), and a full
collection still comes, rarely, for a long run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

BATCH_THRESHOLDS = (20_000, 100, 100)


def use_batch_schedule() -> None:
    """Collect on the batch schedule from now on: for the process of the command, which
    ends with the run. (Restoring the default at the end would cost a collection of the
    whole heap at once: the older generations' counters are far past the default's.)"""
    gc.set_threshold(*BATCH_THRESHOLDS)


@contextmanager
def batch_collection() -> Iterator[None]:
    """Collect on the batch schedule while the block runs (forked workers inherit it),
    then restore the caller's (a long-lived host keeps its own)."""
    before = gc.get_threshold()
    gc.set_threshold(*BATCH_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


# Giving memory back ----------------------------------------------------------------------------
# A large module's tree (85 MB for a 240 kB file) is freed after its file, but glibc keeps
# the freed pages of its heap for later: a worker that met one large file then holds its
# high-water mark for the rest of the run, and the workers' marks add up. Trimming the heap
# after a large file hands those pages back (measured on the benchmark corpus: a worker at
# 173 MB after its largest file drops to 100 MB). Pages handed back are faulted in again by
# the next tree (about 5% of a run's CPU when trimmed after every file of 16 kB), so the
# heap is trimmed only when the process holds more than TRIM_ABOVE.
LARGE_FILE_BYTES = 64 << 10
TRIM_ABOVE = 96 << 20  # resident bytes
_TRIM: list = []


def release_after(size: int) -> None:
    """Return the C heap's free pages to the system after a file of ``size`` bytes, when it
    is large enough for its tree to matter and the process has grown (glibc only)."""
    if size < LARGE_FILE_BYTES:
        return
    if not _TRIM:
        _TRIM.append(_malloc_trim())
    trim = _TRIM[0]
    if trim is not None and _resident() > TRIM_ABOVE:
        trim(0)


def _resident() -> int:
    """Resident bytes of this process (Linux: ``/proc/self/statm``), 0 if unknown."""
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE[0]
    except (OSError, ValueError, IndexError):
        return 0


_PAGE = [4096]


def _malloc_trim():  # type: ignore[no-untyped-def]
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        _PAGE[0] = os.sysconf("SC_PAGE_SIZE")
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError, ValueError):  # musl, or no libc by that name
        return None
