from __future__ import annotations

import math

from ema_lint.analysis.objects.horizon import describe_decay, format_count, half_life, horizon


def test_reference_values() -> None:
    assert round(horizon(0.99)) == 100
    assert round(half_life(0.99)) == 69
    assert round(half_life(0.9999)) == 6931
    assert math.isinf(horizon(1.0))


def test_descriptions() -> None:
    assert describe_decay(0.99) == "averages over about 100 updates (half-life 69)"
    assert describe_decay(0.9999) == "averages over about 10,000 updates (half-life 6,931)"
    assert describe_decay(1.0) == "never moves from its initial weights"
    assert format_count(1.5e6) == "1.5M"
