"""The process pool: the same output as one process, in the same order, and the same fixes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ema_lint import runner
from ema_lint.pool import LazyPool, available_cpus
from tests.samples import BAD, GOOD

SOURCES = {
    "a/one.py": BAD,
    "a/two.py": GOOD,
    "a/three.py": BAD.replace("0.99)", "0.99999)") + "x = ModelEmaV2(m, decay=0.9)\n",
    "b/broken.py": "from timm.utils import ModelEmaV2\nema = ModelEmaV2(model, decay=\n",
    "b/plain.py": "print('no trigger here')\n",
    "b/four.py": "import timm.utils as tu\nCONST = 0.95\nema = tu.ModelEmaV2(m, decay=CONST)\n",
    "c/five.py": BAD.replace("ema =", "def f():\n    ema =").replace("\nema", "\n    ema"),
    "c/six.py": BAD,
}


def _project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[tool.ema-lint]\n")
    for name, text in SOURCES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    "flags",
    [(), ("--output-format", "json"), ("--unsafe-fixes", "--statistics"), ("--diff",)],
    ids=lambda f: " ".join(f) or "text",
)
def test_pool_prints_what_one_process_prints(run, tmp_path: Path, flags: tuple[str, ...]) -> None:
    project = _project(tmp_path)
    serial = run("--no-cache", "--jobs", "1", *flags, ".", cwd=project)
    for _ in range(2):  # and the same every time: the order does not depend on the workers
        pooled = run("--no-cache", "--jobs", "3", *flags, ".", cwd=project)
        assert (pooled.code, pooled.out, pooled.err) == (serial.code, serial.out, serial.err)
    assert "EMA901" in serial.out or "--diff" in flags


def test_the_pool_is_used_for_more_than_one_file(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []
    real = LazyPool._start

    def spy(self) -> None:
        started.append(self.jobs)
        real(self)

    monkeypatch.setattr(LazyPool, "_start", spy)
    project = _project(tmp_path)
    run("--no-cache", "-j", "2", ".", cwd=project)
    assert started == [2]
    run("--no-cache", "-j", "2", "a/one.py", "b/plain.py", cwd=project)
    assert started == [2], "one file to parse: no pool"
    run("--no-cache", "-j", "1", ".", cwd=project)
    assert started == [2], "one job: no pool"


@pytest.mark.parametrize("unsafe", [False, True], ids=["fix", "unsafe-fixes"])
def test_fix_through_the_pool_writes_the_same_files(run, tmp_path: Path, unsafe: bool) -> None:
    results = {}
    for jobs in ("1", "3"):
        project = _project(tmp_path / f"j{jobs}")
        flags = ["--unsafe-fixes"] if unsafe else []
        result = run("--no-cache", "--jobs", jobs, "--fix", *flags, ".", cwd=project)
        files = {name: (project / name).read_bytes() for name in SOURCES}
        results[jobs] = (result.code, result.out, files)
    assert results["1"] == results["3"]
    changed = [n for n in SOURCES if results["1"][2][n] != SOURCES[n].encode()]
    assert bool(changed) is unsafe  # EMA101's fixes are unsafe


def test_pool_and_cache_together(run, tmp_path: Path) -> None:
    project = _project(tmp_path)
    cold = run("--no-cache", "-j", "1", ".", cwd=project)
    filled = run("-j", "3", ".", cwd=project)
    warm = run("-j", "3", ".", cwd=project)
    assert cold.out == filled.out == warm.out
    assert list((project / ".ema_lint_cache").rglob("*"))


def test_unreadable_files_are_reported_in_order(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = runner.read_source

    def read(path: Path) -> bytes:
        if path.name in ("one.py", "five.py"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(runner, "read_source", read)  # forked workers inherit it
    project = _project(tmp_path)
    serial = run("--no-cache", "-j", "1", ".", cwd=project)
    pooled = run("--no-cache", "-j", "3", ".", cwd=project)
    assert serial.code == pooled.code == 2
    assert serial.out == pooled.out
    assert serial.out.index("a/one.py: cannot read") < serial.out.index("c/five.py: cannot read")


def test_jobs_must_be_a_positive_number(run, tmp_path: Path) -> None:
    for bad in ("0", "-2", "many"):
        result = run("--jobs", bad, ".", cwd=tmp_path)
        assert result.code == 2 and "--jobs" in result.err


def test_available_cpus_is_the_affinity_mask() -> None:
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    assert available_cpus() >= 1
    if expected is not None:
        assert available_cpus() == expected


# The pool itself ------------------------------------------------------------------------------
def _pid(task: int) -> tuple[int, int]:
    return task, os.getpid()


def _dies_in_a_worker(task: tuple[int, int]) -> int:
    value, parent = task
    if value == 3 and os.getpid() != parent:
        os._exit(1)  # a worker killed (out of memory, say) while on this task
    return value * 10


def test_one_task_runs_in_this_process() -> None:
    pool = LazyPool(_pid, jobs=4)
    pool.submit(0, 7)
    assert list(pool.results()) == [(0, (7, os.getpid()))] and not pool.started


def test_many_tasks_run_in_workers_and_keep_their_index() -> None:
    pool = LazyPool(_pid, jobs=2)
    for i in range(6):
        pool.submit(i, i * 2)
    results = dict(pool.results())
    assert pool.started
    assert sorted(results) == list(range(6))
    assert all(results[i][0] == i * 2 for i in range(6))
    assert all(pid != os.getpid() for _, pid in results.values())


def test_preload_runs_in_the_parent_only_when_the_workers_start() -> None:
    calls: list[int] = []
    idle = LazyPool(_pid, jobs=2, preload=lambda: calls.append(os.getpid()))
    idle.submit(0, 1)
    assert list(idle.results()) == [(0, (1, os.getpid()))] and calls == []  # no pool: none
    busy = LazyPool(_pid, jobs=2, preload=lambda: calls.append(os.getpid()))
    for i in range(3):
        busy.submit(i, i)
    assert sorted(dict(busy.results())) == [0, 1, 2]
    assert calls == [os.getpid()]


def test_collecting_results_waits_on_each_task_a_bounded_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Waiting for the next result must not re-register on every pending task each time
    (``wait(FIRST_COMPLETED)`` in a loop): that is quadratic in the number of files."""
    from concurrent.futures import _base

    acquired: list[int] = []
    real = _base._AcquireFutures.__enter__

    def counting(self) -> None:
        acquired.append(len(self.futures))
        real(self)

    monkeypatch.setattr(_base._AcquireFutures, "__enter__", counting)
    tasks = 300
    pool = LazyPool(_pid, jobs=2)
    for i in range(tasks):
        pool.submit(i, i)
    assert sorted(dict(pool.results())) == list(range(tasks))
    assert sum(acquired) <= 2 * tasks, f"{sum(acquired)} waits for {tasks} tasks"


def test_a_dead_worker_does_not_lose_files() -> None:
    pool = LazyPool(_dies_in_a_worker, jobs=2)
    for i in range(8):
        pool.submit(i, (i, os.getpid()))
    assert dict(pool.results()) == {i: i * 10 for i in range(8)}


def test_check_files_keeps_the_order_of_the_files(tmp_path: Path) -> None:
    from ema_lint.config import Settings

    project = _project(tmp_path)
    shutil.copy(project / "a" / "one.py", project / "a" / "zero.py")
    files = sorted(project.rglob("*.py"), reverse=True)
    outcomes = runner.check_files(files, Settings(), runner.Mode(), jobs=3)
    assert [o.path for o in outcomes] == [str(f) for f in files]


def test_without_a_cache_a_large_run_is_read_and_pre_filtered_by_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ema_lint.config import Settings

    project = _project(tmp_path)
    for i in range(runner.FILTER_IN_WORKERS_FROM):
        (project / "b" / f"plain{i}.py").write_text(f"x = {i}\n")
    files = sorted(project.rglob("*.py"))
    serial = runner.check_files(files, Settings(), runner.Mode(), jobs=1)
    read: list[Path] = []
    real = runner.read_source

    def spy(path: Path) -> bytes:
        read.append(path)
        return real(path)

    monkeypatch.setattr(runner, "read_source", spy)  # the forked workers keep their own
    pooled = runner.check_files(files, Settings(), runner.Mode(), jobs=2)
    assert read == [], "the parent read no file"

    def found(outcomes: list[runner.FileOutcome]) -> list[tuple]:
        return [(o.path, [(d.code, d.start, d.message) for d in o.diagnostics]) for o in outcomes]

    assert found(pooled) == found(serial)
    assert any(o.diagnostics for o in pooled)
