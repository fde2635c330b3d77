"""Building a FileContext from source text, for the analysis tests."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext


def context(source: str) -> FileContext:
    return FileContext(cst.parse_module(source), "t.py")


def calls_named(ctx: FileContext, name: str) -> list[cst.Call]:
    """Calls whose callee's last name is ``name``, in document order."""
    found = []
    for call in ctx.nodes(cst.Call):
        func = call.func
        last = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        if last == name:
            found.append(call)
    return found


def probe(ctx: FileContext, marker: str = "__probe__") -> cst.BaseExpression:
    """The value assigned to ``marker`` (the last such assignment)."""
    found = None
    for node in ctx.nodes(cst.Assign):
        target = node.targets[0].target
        if isinstance(target, cst.Name) and target.value == marker:
            found = node.value
    assert found is not None, marker
    return found
