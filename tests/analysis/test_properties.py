"""Properties of the value arithmetic and the swapped-semantics fix, with hypothesis."""

from __future__ import annotations

from decimal import Decimal

import libcst as cst
from hypothesis import given, settings
from hypothesis import strategies as st

from ema_lint.analysis.objects.apis import Ramp, RampKind
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.rules.ema103_semantics_swapped import complement_text

decimals = st.decimals(min_value="0.00001", max_value="0.99999", places=5).map(
    lambda d: format(d.normalize(), "f")
)


@given(decimals)
def test_complement_sums_to_one_and_round_trips(text: str) -> None:
    other = complement_text(text)
    assert other is not None
    assert Decimal(text) + Decimal(other) == 1
    assert Decimal(complement_text(other)) == Decimal(text)
    cst.parse_expression(other)


@given(
    st.floats(min_value=0.5, max_value=0.99999),
    st.sampled_from(list(RampKind)),
    st.integers(min_value=0, max_value=10**7),
)
def test_ramps_stay_below_their_ceiling_and_grow(ceiling: float, kind: RampKind, t: int) -> None:
    ramp = Ramp(kind)
    now = ramp.decay_at(ceiling, t, 100.0, 2 / 3)
    later = ramp.decay_at(ceiling, t + 1000, 100.0, 2 / 3)
    assert now <= ceiling + 1e-12 and later >= now - 1e-12


@settings(max_examples=25, deadline=None)
@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.integers(0, 5))
def test_arithmetic_resolves_like_python(x: float, k: int) -> None:
    source = f"A = {x!r}\nB = {k}\n__probe__ = 1 - A * 2 + B ** 2\n"
    module = cst.parse_module(source)
    ctx = FileContext(module, "t.py")
    value = ctx.get(ValueResolver).resolve(module.body[-1].body[0].value)
    assert value is not None and value.value == 1 - x * 2 + k**2
