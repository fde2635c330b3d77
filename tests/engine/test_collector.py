"""The collector's batch schedule holds during a run and the caller's comes back after it
(a host calling the runner keeps its own; only the command's process keeps the batch one)."""

from __future__ import annotations

import gc
from pathlib import Path

from ema_lint.collector import BATCH_THRESHOLDS, batch_collection
from ema_lint.config import Settings
from ema_lint.runner import Mode, check_files


def test_the_schedule_holds_inside_and_is_restored_after() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(500, 7, 9)
        with batch_collection():
            assert gc.get_threshold() == BATCH_THRESHOLDS
        assert gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*before)


def test_a_run_leaves_the_callers_schedule(tmp_path: Path) -> None:
    source = tmp_path / "train.py"
    source.write_text("from torch_ema import ExponentialMovingAverage\n")
    before = gc.get_threshold()
    try:
        gc.set_threshold(600, 8, 8)
        check_files([source], Settings(isolated=True), Mode())
        assert gc.get_threshold() == (600, 8, 8)
    finally:
        gc.set_threshold(*before)
