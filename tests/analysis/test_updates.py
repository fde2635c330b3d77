"""Hand-written in-place averaging updates: the shadow, the source and the weights."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.updates import InPlaceUpdates
from tests.analysis.helpers import context


def code(node) -> str:
    return "" if node is None else cst.Module([]).code_for_node(node)


def weight(coefficient) -> str:
    if coefficient is None:
        return ""
    text = code(coefficient.expr)
    return f"1 - ({text})" if coefficient.complement else text


@pytest.mark.parametrize(
    ("statement", "form", "old", "new"),
    [
        ("e.mul_(d).add_(p, alpha=1 - d)", "mul_add", "d", "1 - d"),
        ("e.data.mul_(d).add_(p.data, alpha=1 - d)", "mul_add", "d", "1 - d"),
        ("e.mul_(alpha).add_(1 - alpha, p)", "mul_add", "alpha", "1 - alpha"),
        ("e.mul_(d).add_(p * (1 - d))", "mul_add", "d", "(1 - d)"),
        ("e.lerp_(p, 1 - d)", "lerp", "1 - (1 - d)", "1 - d"),
        ("e.copy_(e * d + p * (1 - d))", "copy", "d", "(1 - d)"),
        ("e.copy_(p.detach().lerp(e, beta))", "copy", "beta", "1 - (beta)"),
        ("e.sub_((e - p) * (1 - d))", "sub", "1 - ((1 - d))", "(1 - d)"),
        ("e.data = d * e.data + (1 - d) * p.data", "assign", "d", "(1 - d)"),
    ],
)
def test_update_forms(statement: str, form: str, old: str, new: str) -> None:
    source = f"for e, p in zip(ema.parameters(), model.parameters()):\n    {statement}\n"
    ctx = context(source)
    [update] = ctx.get(InPlaceUpdates).updates
    assert update.form == form
    assert weight(update.old_weight) == old
    assert weight(update.new_weight) == new
    assert code(update.shadow_container) == "ema"
    assert code(update.source_container) == "model"


def test_two_statement_update_and_foreach() -> None:
    ctx = context(
        "for ema_v, model_v in zip(ema.state_dict().values(), model.state_dict().values()):\n"
        "    ema_v.mul_(decay)\n"
        "    ema_v.add_(model_v, alpha=1 - decay)\n"
        "torch._foreach_lerp_(ema_params, params, weight=1 - decay)\n"
    )
    first, second = ctx.get(InPlaceUpdates).updates
    assert first.form == "mul_add" and code(first.old_weight.expr) == "decay"
    assert second.form == "foreach" and code(second.shadow) == "ema_params"


def test_not_averaging() -> None:
    ctx = context("x.add_(y)\np.mul_(0.5)\nloss = a + b\nw.data.copy_(v)\n")
    assert ctx.get(InPlaceUpdates).updates == []
