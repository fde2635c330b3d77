"""Constant folding, without any rule."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.context import FileContext
from ema_lint.analysis.values import ValueResolver


def resolve(source: str, expression: str):
    module = cst.parse_module(source + f"\n__probe__ = {expression}\n")
    ctx = FileContext(module, "t.py")
    probe = module.body[-1].body[0].value
    return ctx.get(ValueResolver).resolve(probe)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0.999", 0.999),
        ("-0.5", -0.5),
        ("1 - 1e-4", 1 - 1e-4),
        ("0.5 ** (1 / 2000)", 0.5 ** (1 / 2000)),
        ("2 * 3 + 1", 7),
        ("'0.9999'", "0.9999"),
        ("True", True),
    ],
)
def test_literals_and_arithmetic(expression: str, expected) -> None:
    value = resolve("", expression)
    assert value is not None and value.value == pytest.approx(expected)


def test_module_constants_and_their_origin() -> None:
    value = resolve("DECAY = 0.99\nALIAS = DECAY", "ALIAS")
    assert value.value == 0.99 and value.via == "DECAY"
    assert isinstance(value.origin, cst.Float) and value.origin.value == "0.99"


@pytest.mark.parametrize(
    ("source", "expression"),
    [
        ("", "unknown_name"),
        ("X = 0.9\nX = 0.99", "X"),
        ("X = 0.9\nX += 0.01", "X"),
        ("", "1 / 0"),
        ("", "f(0.9)"),
        ("A = B\nB = A", "A"),
    ],
)
def test_unknown_stays_unknown(source: str, expression: str) -> None:
    assert resolve(source, expression) is None
