"""``ema-lint rules`` and ``ema-lint explain``."""

from __future__ import annotations

import json

from ema_lint import registry


def test_rules_table_lists_every_rule(run) -> None:
    result = run("rules")
    assert result.code == 0
    for rule in registry.all_rules():
        assert rule.code in result.out and rule.name in result.out


def test_rules_json(run) -> None:
    rows = json.loads(run("rules", "--output-format", "json").out)
    assert {r["code"] for r in rows} == {r.code for r in registry.all_rules()}


def test_explain_by_code_and_name(run) -> None:
    by_code = run("explain", "EMA101")
    by_name = run("explain", "ema-decay-out-of-range")
    assert by_code.code == 0 and by_code.out == by_name.out
    assert "## Why it hurts training" in by_code.out
    assert "| `min` | float | `0.999` |" in by_code.out


def test_explain_unknown(run) -> None:
    result = run("explain", "EMA000")
    assert result.code == 2 and "EMA000" in result.err


def test_module_entry_point() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "ema_lint", "rules"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and "EMA101" in proc.stdout
