"""A decay in training terms: how many updates the average spans, and its half-life."""

from __future__ import annotations

import math


def horizon(decay: float) -> float:
    """Time constant 1/(1-D) in updates (infinite for D >= 1)."""
    if decay >= 1.0:
        return math.inf
    return 1.0 / (1.0 - decay)


def half_life(decay: float) -> float:
    """Updates after which an old weight counts half: ln 2 / -ln D."""
    if decay >= 1.0:
        return math.inf
    if decay <= 0.0:
        return 0.0
    return math.log(2.0) / -math.log(decay)


def format_count(value: float) -> str:
    """A step count rounded the way people say it: 100, 693, 6,931, 1.2M."""
    if math.isinf(value):
        return "infinitely many"
    if value >= 10_000_000:
        return f"{value / 1_000_000:.0f}M"
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10:
        return f"{round(value):,}"
    return f"{value:.1f}".rstrip("0").rstrip(".")


def format_number(value: float) -> str:
    """A decay or momentum as people write it: 0.9999, 1e-05, 0.99 (no float noise)."""
    text = f"{value:.10g}"
    if "e" not in text and "." not in text and math.isfinite(value) and value != int(value):
        text = repr(value)
    return text


def float_literal(value: float) -> str:
    """Text for a float literal of ``value`` (always with a dot or exponent)."""
    text = format_number(value)
    if "." not in text and "e" not in text and "inf" not in text and "nan" not in text:
        text += ".0"
    return text


def describe_decay(decay: float, *, unit: str = "updates") -> str:
    """'averages over about 100 updates (half-life 69)'."""
    if decay >= 1.0:
        return "never moves from its initial weights"
    if decay <= 0.0:
        return "is just the latest weights"
    return (
        f"averages over about {format_count(horizon(decay))} {unit} "
        f"(half-life {format_count(half_life(decay))})"
    )
