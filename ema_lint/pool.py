"""A process pool over files, started only when more than one file needs the engine.

Most files of a real project are settled in the parent (the pre-filter or the cache), so
the pool is created lazily, at the second file that must be parsed: a run over files
without triggers, a warm run and a one-file run never pay for it. Workers are forked where
that is safe (Linux); the caller's ``preload`` imports the rules and libcst in the parent
just before, so the workers inherit them instead of importing them again. Results come
back keyed by the caller's index (the caller restores the order). If a worker dies (killed
for memory, say), the files it did not finish are checked in the parent, so the run still
completes.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

# multiprocessing and concurrent.futures cost ~50 ms to import: only a run that starts the
# pool (two files to parse) pays it.
if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

T = TypeVar("T")
R = TypeVar("R")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def _context() -> Any:
    import multiprocessing

    # fork shares the parent's imported modules; elsewhere the platform default is safer.
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


PARENT_POLL = 0.5  # seconds between a worker's looks at whether its parent still lives


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(1)  # the parent is gone (kill -9): nobody will read this worker's results


def _quiet_worker(
    initializer: Callable[..., None] | None, initargs: tuple, parent: int | None = None
) -> None:
    # Ctrl-C is the parent's to handle: a worker printing its own traceback is noise.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is not None:
        # A parent killed outright (kill -9, the OOM killer) cannot stop its workers: each
        # watches it, and exits when it is gone instead of living on.
        if os.getppid() != parent:
            os._exit(1)
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    if initializer is not None:
        initializer(*initargs)


class LazyPool(Generic[T, R]):
    """Run ``fn(task)`` for submitted tasks: in-process for one, in ``jobs`` processes for more.

    ``fn`` must be a module-level function (it is pickled by name).
    """

    def __init__(
        self,
        fn: Callable[[T], R],
        jobs: int,
        initializer: Callable[..., None] | None = None,
        initargs: tuple = (),
        preload: Callable[[], None] | None = None,
    ) -> None:
        self.fn = fn
        self.jobs = max(1, jobs)
        self.initializer = initializer
        self.initargs = initargs
        # Run in the parent just before the workers start: what it imports, forked workers
        # inherit instead of each importing it again.
        self.preload = preload
        self._held: list[tuple[int, T]] = []  # submitted before the pool exists
        self._executor: ProcessPoolExecutor | None = None
        self._futures: dict[Future, tuple[int, T]] = {}
        self._orphans: list[tuple[int, T]] = []  # submitted after a worker died
        self.started = False

    def submit(self, index: int, task: T) -> None:
        if self._executor is None:
            self._held.append((index, task))
            if self.jobs > 1 and len(self._held) > 1:
                self._start()
            return
        from concurrent.futures.process import BrokenProcessPool

        try:
            self._futures[self._executor.submit(self.fn, task)] = (index, task)
        except BrokenProcessPool:
            self._orphans.append((index, task))

    def _start(self) -> None:
        from concurrent.futures import ProcessPoolExecutor

        if self.preload is not None:
            self.preload()
        self.started = True
        self._executor = ProcessPoolExecutor(
            max_workers=self.jobs,
            mp_context=_context(),
            initializer=_quiet_worker,
            initargs=(self.initializer, self.initargs, os.getpid()),
        )
        held, self._held = self._held, []
        for index, task in held:
            self.submit(index, task)

    def results(self) -> Iterator[tuple[int, R]]:
        """Every (index, result), in completion order; call once, after the last submit."""
        if self._executor is None:
            if self._held and self.initializer is not None:
                self.initializer(*self.initargs)
            for index, task in self._held:
                yield index, self.fn(task)
            self._held = []
            return
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        executor = self._executor
        if self._orphans:
            yield from self._rescue([])
            return
        try:
            # ``as_completed`` waits on every future once; ``wait(FIRST_COMPLETED)`` in a
            # loop re-registers on all pending futures per completion (quadratic in files).
            for future in as_completed(list(self._futures)):
                index, task = self._futures.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    yield from self._rescue([(index, task)])
                    return
                yield index, result
        except BaseException:
            self._terminate()
            raise
        else:
            executor.shutdown(wait=True)

    def _rescue(self, first: list[tuple[int, T]]) -> Iterator[tuple[int, R]]:
        """A worker died: finish its files and every unfinished one in this process."""
        left = first + self._orphans
        self._orphans = []
        for future in list(self._futures):
            index, task = self._futures.pop(future)
            if future.done() and not future.cancelled() and future.exception() is None:
                yield index, future.result()
            else:
                left.append((index, task))
        self._terminate()
        if self.initializer is not None:
            self.initializer(*self.initargs)
        for index, task in left:
            yield index, self.fn(task)

    def terminate(self) -> None:
        """Stop the workers now, finished or not (on an error or Ctrl-C in the parent)."""
        self._terminate()

    def _terminate(self) -> None:
        executor = self._executor
        if executor is None:
            return
        self._executor = None
        processes = list((getattr(executor, "_processes", None) or {}).values())
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=5)
