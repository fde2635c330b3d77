"""The process pool: workers never outlive a killed parent, and never outnumber the work.

After ``kill -9`` of the parent, workers used to live on indefinitely; ``--jobs 1000``
started a thousand workers for two files.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ema_lint.pool import available_cpus
from tests.samples import BAD

ROOT = Path(__file__).resolve().parents[2]

# Two workers busy for ten minutes, their pids printed; then the parent waits too.
PARENT = """
import sys, time
from ema_lint.pool import LazyPool

def busy(task):
    time.sleep(600)
    return task

if __name__ == "__main__":
    pool = LazyPool(busy, 2)
    pool.submit(0, "a")
    pool.submit(1, "b")
    while len(pool._executor._processes) < 2:
        time.sleep(0.05)
    print(" ".join(str(pid) for pid in pool._executor._processes), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited, its reaper is just slow


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.skipif(sys.platform != "linux", reason="forked workers")
def test_workers_exit_when_the_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    workers: list[int] = []
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60  # generous: the workers look twice a second
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _alive(pid)]
    finally:
        for pid in workers:  # only the processes this test started
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if parent.poll() is None:
            parent.kill()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The max_workers of every process pool started (each started with at most two)."""
    sizes: list[int] = []
    real = concurrent.futures.ProcessPoolExecutor

    def recording(max_workers=None, **kwargs):
        sizes.append(max_workers)
        return real(max_workers=min(max_workers or 1, 2), **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", recording)
    return sizes


@pytest.mark.parametrize("files", [2, 5])
def test_workers_are_capped_by_files_and_cpus(
    run, project: Path, started: list[int], files: int
) -> None:
    for i in range(files):
        (project / f"train{i}.py").write_text(BAD)
    result = run("--jobs", "1000", "--no-cache", ".", cwd=project)
    assert result.code == 1 and result.out.count("EMA101") == files
    assert started, "two files to parse start the pool"
    assert all(size <= min(files, available_cpus()) for size in started), started
