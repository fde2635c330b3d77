"""Counts of what the generated-script tests checked, reported at the end of the run."""

from __future__ import annotations

from collections import Counter

TALLY: Counter[str] = Counter()


def summary() -> list[str]:
    """Lines for the terminal summary (empty when no generated script was checked)."""
    scripts = TALLY["scripts"]
    if not scripts:
        return []
    bugs = {key[4:]: count for key, count in sorted(TALLY.items()) if key.startswith("bug:")}
    per_rule = ", ".join(f"{code} {count}" for code, count in bugs.items()) or "none"
    return [
        f"generated training scripts: {scripts} checked, {TALLY['buggy']} with bugs, "
        f"{sum(bugs.values())} bugs injected ({per_rule})",
        f"findings: {TALLY['found']} reported, {TALLY['matched']} matched an injected bug: "
        f"precision {_percent(TALLY['matched'], TALLY['found'])}, "
        f"recall {_percent(TALLY['matched'], sum(bugs.values()))}; "
        f"--fix removed {TALLY['fixed']} of {TALLY['fixable']} fixable",
    ]


def _percent(part: int, whole: int) -> str:
    return "100%" if whole == 0 else f"{100 * part / whole:.1f}%"
