"""Unit-test code: where averaging values are chosen for a test, not for a training run.

A unit test of an EMA picks a decay such as 0.5 or 0.9 so that a handful of updates move
the average visibly; the value says nothing about any training run, and judging it against
the training range only produces noise. Test code is recognised the way pytest and unittest
collect it, and only in a test module: training scripts often have a ``def test(model)``
evaluation function or a ``test.py`` evaluation script, which are not unit tests.
"""

from __future__ import annotations

import posixpath
import re

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.options import Option

# pytest's default collection: test_*.py and *_test.py files; conftest.py holds fixtures.
# A module under a ``tests``/``testing`` folder is a test module whatever its name.
_TEST_FILE = re.compile(r"(?:^test_.*|.*_test|^conftest)\.py$")
_TEST_FOLDERS = frozenset({"tests", "testing"})
_TEST_CLASS = re.compile(r"^Test|Tests?$|TestCase$")


# The option of the value rules that turns the judgment of test code back on.
JUDGE_TESTS = Option(
    "judge-tests",
    bool,
    False,
    "Judge values written in unit tests (test functions of test modules).",
)


def is_test_module(path: str) -> bool:
    """Whether the file at ``path`` is a unit-test module (by pytest's naming)."""
    parts = [p for p in posixpath.normpath(path.replace("\\", "/")).split("/") if p]
    if not parts:
        return False
    return bool(_TEST_FILE.match(parts[-1])) or any(p in _TEST_FOLDERS for p in parts[:-1])


def _decorator_names(node: cst.FunctionDef) -> list[str]:
    names = []
    for decorator in node.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call):
            expr = expr.func
        while isinstance(expr, cst.Attribute):
            names.append(expr.attr.value)
            expr = expr.value
        if isinstance(expr, cst.Name):
            names.append(expr.value)
    return names


def _base_names(node: cst.ClassDef) -> list[str]:
    names = []
    for base in node.bases:
        expr = base.value
        if isinstance(expr, cst.Attribute):
            names.append(expr.attr.value)
        elif isinstance(expr, cst.Name):
            names.append(expr.value)
    return names


def _is_test_scope(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.FunctionDef):
        name = node.name.value
        return name.startswith("test") or "fixture" in _decorator_names(node)
    if isinstance(node, cst.ClassDef):
        if _TEST_CLASS.search(node.name.value):
            return True
        return any(b.endswith("TestCase") for b in _base_names(node))
    return False


class TestCode:
    """Which nodes sit in a test function, test class or fixture of a unit-test module."""

    __test__ = False  # not a pytest test class itself

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.module_is_test = is_test_module(ctx.path)

    @classmethod
    def build(cls, ctx: FileContext) -> TestCode:
        return cls(ctx)

    def holds(self, *nodes: cst.CSTNode | None) -> bool:
        """Whether any of ``nodes`` is unit-test code."""
        if not self.module_is_test:
            return False
        index = self.ctx.index
        for node in nodes:
            if node is None or index.order_of(node) is None:
                continue
            if any(_is_test_scope(a) for a in index.ancestors(node)):
                return True
        return False
