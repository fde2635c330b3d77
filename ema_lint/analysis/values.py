"""Static values of expressions: literals, arithmetic on them, and the names that hold them.

A decay in a real script is rarely a literal at the call: it sits in a constant, an argparse
default or a config dict. The resolver follows an expression to a number (or string, bool)
and remembers where the number was written, so a message can say where it came from and a
fix can edit it there. Anything it cannot follow is *unknown*, and no value rule fires on an
unknown.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from .context import FileContext

Scalar = int | float | str | bool | None


@dataclass(frozen=True, eq=False)
class Value:
    """A resolved value and where it came from."""

    value: Scalar
    # The literal that spells the value when it is exactly one literal (for fixes), else None.
    origin: cst.BaseExpression | None
    # How the value was reached, for messages ("EMA_DECAY", "--ema-decay default"); "" if direct.
    via: str = ""


_BINARY: dict[type, Callable[[float, float], float]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.Divide: operator.truediv,
    cst.FloorDivide: operator.floordiv,
    cst.Modulo: operator.mod,
    cst.Power: operator.pow,
}


def literal_number(node: cst.BaseExpression) -> int | float | None:
    """The number spelled by an Integer/Float literal (with an optional unary minus)."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_number(node.expression)
        return None if inner is None else -inner
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            return node.evaluated_value
        except (ValueError, SyntaxError):
            return None
    return None


class ValueResolver:
    """Constant folding over the module's bindings."""

    # Give up on chains longer than this (a = b, b = c, ...), and on cycles.
    MAX_DEPTH = 16

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._module_bindings = self._collect_module_bindings(ctx.module)

    @classmethod
    def build(cls, ctx: FileContext) -> ValueResolver:
        return cls(ctx)

    @staticmethod
    def _collect_module_bindings(module: cst.Module) -> dict[str, list[cst.BaseExpression]]:
        """Module-level ``NAME = expr`` assignments (all of them, in order)."""
        bindings: dict[str, list[cst.BaseExpression]] = {}
        for statement in module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            bindings.setdefault(target.target.value, []).append(small.value)
                elif (
                    isinstance(small, cst.AnnAssign)
                    and small.value is not None
                    and isinstance(small.target, cst.Name)
                ):
                    bindings.setdefault(small.target.value, []).append(small.value)
                elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
                    # A constant that is later modified is not a constant.
                    bindings.setdefault(small.target.value, []).append(small)  # type: ignore[arg-type]
        return bindings

    # Public ---------------------------------------------------------------------------------
    def resolve(self, node: cst.BaseExpression) -> Value | None:
        """The static value of ``node``, or None when it is unknown."""
        return self._resolve(node, 0)

    def number(self, node: cst.BaseExpression) -> float | None:
        value = self.resolve(node)
        if value is None or isinstance(value.value, bool):
            return None
        if isinstance(value.value, (int, float)):
            return float(value.value)
        return None

    # Internals -------------------------------------------------------------------------------
    def _resolve(self, node: cst.BaseExpression, depth: int) -> Value | None:
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, (cst.Integer, cst.Float)):
            number = literal_number(node)
            return None if number is None else Value(number, node)
        if isinstance(node, cst.SimpleString):
            try:
                return Value(node.evaluated_value, node)
            except (ValueError, SyntaxError):
                return None
        if isinstance(node, cst.ConcatenatedString):
            return None
        if isinstance(node, cst.Name):
            if node.value in ("True", "False", "None"):
                return Value({"True": True, "False": False, "None": None}[node.value], node)
            return self._resolve_name(node, depth)
        if isinstance(node, cst.UnaryOperation):
            inner = self._resolve(node.expression, depth + 1)
            if inner is None or not _is_number(inner.value):
                return None
            if isinstance(node.operator, cst.Minus):
                origin = node if inner.origin is node.expression else None
                return Value(-inner.value, origin, inner.via)  # type: ignore[operator]
            if isinstance(node.operator, cst.Plus):
                return Value(inner.value, None, inner.via)
            return None
        if isinstance(node, cst.BinaryOperation):
            return self._resolve_binary(node, depth)
        return self.resolve_extended(node, depth)

    def resolve_extended(self, node: cst.BaseExpression, depth: int) -> Value | None:
        """Hook for the richer resolution paths (attributes, calls, subscripts)."""
        return None

    def _resolve_binary(self, node: cst.BinaryOperation, depth: int) -> Value | None:
        op = _BINARY.get(type(node.operator))
        if op is None:
            return None
        left = self._resolve(node.left, depth + 1)
        right = self._resolve(node.right, depth + 1)
        if left is None or right is None:
            return None
        if not (_is_number(left.value) and _is_number(right.value)):
            return None
        try:
            result = op(left.value, right.value)  # type: ignore[arg-type]
        except (ArithmeticError, ValueError, OverflowError):
            return None
        if isinstance(result, complex) or (isinstance(result, float) and not math.isfinite(result)):
            return None
        via = left.via or right.via
        return Value(result, None, via)

    def _resolve_name(self, node: cst.Name, depth: int) -> Value | None:
        assigned = self._module_bindings.get(node.value)
        if not assigned or len(assigned) != 1 or not isinstance(assigned[0], cst.BaseExpression):
            return None
        inner = self._resolve(assigned[0], depth + 1)
        if inner is None:
            return None
        return Value(inner.value, inner.origin, inner.via or node.value)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
