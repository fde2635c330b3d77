"""Smoke test of the evidence experiments: one experiment in quick mode.

Skipped when torch (or matplotlib, which draws the plot) is not installed.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

RUN_ALL = Path(__file__).resolve().parents[2] / "docs" / "evidence" / "run_all.py"


def test_ema301_quick_run_shows_the_fix_helps(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(RUN_ALL), "--quick", "--only", "EMA301", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

    folder = tmp_path / "EMA301"
    assert (folder / "results.md").read_text().startswith("# EMA301")
    assert (folder / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    result = json.loads((folder / "results.json").read_text())
    variants = result["variants"]
    for variant in ("buggy", "fixed"):
        values = variants[variant]["final_averaged"] + variants[variant]["final_online"]
        curves = variants[variant]["curves_averaged"] + variants[variant]["curves_online"]
        values += [x for curve in curves for x in curve]
        assert values
        assert all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in values)

    buggy = variants["buggy"]["final_averaged_mean_std"][0]
    fixed = variants["fixed"]["final_averaged_mean_std"][0]
    assert fixed > buggy
