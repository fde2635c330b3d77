"""A linted file's tree is freed when its findings are taken, not at the next collection.

Facts refer back to their context and rules to their reports: left as cycles, each file's
tree (tens of MB for a large module) waits for a collection of an older generation, which
the batch schedule makes rare, and a worker's memory climbs file after file."""

from __future__ import annotations

import gc

import libcst

from benchmarks.training_file import TRAINING_FILE
from ema_lint import collector, engine
from ema_lint.file_settings import FileSettings
from ema_lint.registry import default_codes


def _tree_left_as_garbage(lint) -> int:  # type: ignore[no-untyped-def]
    settings = FileSettings(codes=sorted(default_codes()), prefilter=False)
    lint(TRAINING_FILE, "train.py", settings)  # imports, warm caches
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        found = lint(TRAINING_FILE, "train.py", settings)
        assert found, "the training file has findings"
        gc.collect()
        return sum(isinstance(o, libcst.CSTNode) for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()


def test_lint_frees_the_tree_by_reference_counting() -> None:
    assert _tree_left_as_garbage(engine.lint) == 0


def test_an_unreleased_analysis_would_leave_it_to_the_collector() -> None:
    """The check above can fail: without ``release`` the tree is cyclic garbage."""

    def unreleased(data, path, settings):  # type: ignore[no-untyped-def]
        return engine.analyze(data, path, settings).diagnostics

    assert _tree_left_as_garbage(unreleased) > 0


def test_release_after_small_and_large_files() -> None:
    collector.release_after(10)  # below the threshold: nothing to do
    collector.release_after(collector.LARGE_FILE_BYTES)  # trims where glibc is, else no-op
