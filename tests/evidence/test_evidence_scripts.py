"""Each evidence experiment's buggy script is a fixture: exactly its rule, and the real fix.

The docs show the fixed script that ema-lint's own fix produces, not a hand-written one
(EMA102 has no automatic fix: there the fixed script is hand-written and must be silent).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import ema_lint
from ema_lint import registry

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted(p.parent for p in (ROOT / "docs" / "evidence").glob("EMA*/buggy.py"))


def test_there_are_eight_experiments() -> None:
    codes = {p.name for p in EXPERIMENTS}
    assert codes >= {"EMA101", "EMA102", "EMA202", "EMA204", "EMA301", "EMA302", "EMA401", "EMA402"}


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
def test_buggy_script_reports_exactly_its_rule(folder: Path) -> None:
    source = (folder / "buggy.py").read_bytes()
    found = {d.code for d in ema_lint.check(source, path="buggy.py")}
    assert found == {folder.name}


@pytest.mark.parametrize("folder", EXPERIMENTS, ids=lambda p: p.name)
def test_fixed_script_is_what_the_fix_produces(folder: Path) -> None:
    rule = registry.by_code()[folder.name]
    buggy = (folder / "buggy.py").read_bytes()
    fixed = (folder / "fixed.py").read_bytes()
    assert folder.name not in {d.code for d in ema_lint.check(fixed, path="fixed.py")}
    if rule.fix_applicability is None:
        pytest.skip(f"{rule.code} has no automatic fix: fixed.py is written by hand")
    result = ema_lint.fix(buggy, path="buggy.py", unsafe=True)
    assert result.source == fixed
