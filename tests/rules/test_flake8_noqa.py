"""Under flake8 the same comments suppress the same findings as on the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixture_cases import ROOT

pytest.importorskip("flake8")

MULTI_LINE = """\
import os
from timm.utils import ModelEmaV2

ema = ModelEmaV2(  # noqa: EMA101
    model,
    decay=0.99,
)
"""

FILE_LEVEL = """\
# ema-lint: noqa
from timm.utils import ModelEmaV2

ema = ModelEmaV2(model, decay=0.99)
"""

NAMED = """\
import os  # ema-lint: noqa: ema-decay-out-of-range
from timm.utils import ModelEmaV2

ema = ModelEmaV2(model, decay=0.99)  # ema-lint: noqa: ema-decay-out-of-range
"""


def _flake8(path: Path, *args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select", "EMA,F401", *args, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return [line.split(": ", 1)[1].split()[0] for line in proc.stdout.splitlines()]


def _cli(path: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ema_lint", "--isolated", "--output-format", "json", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    return [d["code"] for d in json.loads(proc.stdout)["diagnostics"]]


def test_noqa_on_the_first_line_of_a_multi_line_statement(tmp_path: Path) -> None:
    path = tmp_path / "multi.py"
    path.write_text(MULTI_LINE)
    assert _cli(path) == []
    assert _flake8(path) == ["F401"]
    assert "EMA101" in _flake8(path, "--disable-noqa")


def test_file_level_noqa(tmp_path: Path) -> None:
    path = tmp_path / "file.py"
    path.write_text(FILE_LEVEL)
    assert _cli(path) == []
    assert _flake8(path) == []


def test_rule_names_in_ema_lint_form_do_not_hide_other_plugins(tmp_path: Path) -> None:
    path = tmp_path / "named.py"
    path.write_text(NAMED)
    assert _cli(path) == []
    # flake8 does not read the ema-lint form: F401 on the same kind of comment stays.
    assert _flake8(path) == ["F401"]


def test_a_bad_plugin_option_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "x.py"
    path.write_text("x = 1\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flake8",
            "--isolated",
            "--ema-decay-out-of-range-min=abc",
            str(path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "flake8: error: ema-lint: --ema-decay-out-of-range-min: expected a float, got 'abc'"
    ]
