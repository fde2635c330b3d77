"""Averaging updates that only reach some entries: a loop that filters by name or kind.

``for name, p in model.named_parameters(): if "weight" in name: shadow[name].mul_(d)...``
or ``if p.ndim > 1`` (matrices only) or ``if "bn" in name: continue``: the entries the
filter skips are never written by the update. This provider finds the filter of each
hand-written update (the ``if`` around it, or an ``if ...: continue`` before it in the loop),
classifies it (``"name"``, ``"kind"``, ``"requires_grad"``, ``"dtype"``), and says whether
the skipped entries are written by another statement (the ``else`` branch, a second loop or
a ``copy_`` / ``load_state_dict`` of the same copy in the same function).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.updates import (
    InPlaceUpdate,
    InPlaceUpdates,
    _for_targets,
    _root_name,
    strip_tensor,
)
from ema_lint.analysis.syntax.context import FileContext

_NAME_METHODS = {"startswith", "endswith", "find", "__contains__"}
_KIND_ATTRS = {"ndim", "shape"}
_KIND_CALLS = {"dim", "ndimension", "numel", "size"}
# Entries skipped on purpose: integer BatchNorm counters are not averaged anywhere.
_INTEGER_NAMES = ("num_batches_tracked",)
_WRITES = {"copy_", "load_state_dict", "set_", "fill_"}


@dataclass(frozen=True, eq=False)
class UpdateFilter:
    """The condition that keeps an update from some entries."""

    update: InPlaceUpdate
    test: cst.BaseExpression  # the condition, as written
    kind: str  # "name", "kind", "requires_grad", "dtype"
    statement: cst.If  # the ``if`` holding the update, or the ``if ...: continue``
    copied: bool  # the skipped entries are written by another statement
    skips: bool = False  # the condition holds for the skipped entries (``continue``, ``else``)
    # The filter is a choice the code offers: the condition also tests an option that is not
    # about the entry (``if self.skip_norms and "bn" in name: continue``).
    optional: bool = False


class FilteredUpdates:
    """Hand-written updates whose loop skips entries by a condition."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.filters: list[UpdateFilter] = []
        for update in ctx.get(InPlaceUpdates).updates:
            if update.loop is None:
                continue
            found = self._filter(update)
            if found is not None:
                self.filters.append(found)

    @classmethod
    def build(cls, ctx: FileContext) -> FilteredUpdates:
        return cls(ctx)

    def _filter(self, update: InPlaceUpdate) -> UpdateFilter | None:
        loop = update.loop
        assert loop is not None
        bound = _for_targets(loop)
        # The ``if`` between the loop and the update.
        for ancestor in self.index.ancestors(update.node):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If):
                kind = self._kind(ancestor.test, bound)
                if kind is not None:
                    other = ancestor.orelse
                    inside_body = self.index.contains(ancestor.body, update.node)
                    branch = other if inside_body else ancestor.body
                    copied = branch is not None and self._writes(branch)
                    copied = copied or self._written_elsewhere(update, loop)
                    return UpdateFilter(
                        update,
                        ancestor.test,
                        kind,
                        ancestor,
                        copied,
                        skips=not inside_body,
                        optional=self._optional(ancestor.test, bound),
                    )
        # ``if <filter>: continue`` before the update in the loop body.
        for statement in self.index.descendants(loop.body, cst.If):
            assert isinstance(statement, cst.If)
            if not self.index.is_before(statement, update.node):
                continue
            if self.index.enclosing(statement, cst.For) is not loop:
                continue
            if not _continues(statement):
                continue
            kind = self._kind(statement.test, bound)
            if kind is not None:
                # ``if "bn" in name: e.copy_(p); continue`` copies what it skips.
                copied = self._writes(statement.body) or self._written_elsewhere(update, loop)
                return UpdateFilter(
                    update,
                    statement.test,
                    kind,
                    statement,
                    copied,
                    skips=True,
                    optional=self._optional(statement.test, bound),
                )
        return None

    def _kind(self, test: cst.BaseExpression, bound: set[str]) -> str | None:
        names = {n.value for n in self.index.descendants(test, cst.Name) if isinstance(n, cst.Name)}
        if isinstance(test, cst.Name) and test.value in bound:
            names.add(test.value)
        if not names & bound:
            return None
        strings = [
            s.evaluated_value
            for s in self.index.descendants(test, cst.SimpleString)
            if isinstance(s, cst.SimpleString)
        ]
        if isinstance(test, cst.SimpleString):
            strings.append(test.evaluated_value)
        if any(isinstance(s, str) and s in _INTEGER_NAMES for s in strings):
            return None
        attrs = {
            a.attr.value
            for a in self.index.descendants(test, cst.Attribute)
            if isinstance(a, cst.Attribute)
        }
        if isinstance(test, cst.Attribute):
            attrs.add(test.attr.value)
        if "requires_grad" in attrs:
            return "requires_grad"
        if attrs & {"dtype", "is_floating_point"}:
            return "dtype"
        if attrs & _KIND_ATTRS or any(
            isinstance(c.func, cst.Attribute) and c.func.attr.value in _KIND_CALLS
            for c in self.index.descendants(test, cst.Call)
            if isinstance(c, cst.Call)
        ):
            return "kind"
        comparisons = [
            c for c in self.index.descendants(test, cst.Comparison) if isinstance(c, cst.Comparison)
        ]
        if isinstance(test, cst.Comparison):
            comparisons.append(test)
        for comparison in comparisons:
            for target in comparison.comparisons:
                if (
                    isinstance(target.operator, (cst.In, cst.NotIn))
                    and _mentions(target.comparator, bound)
                    and any(
                        isinstance(n, cst.SimpleString)
                        for n in [
                            comparison.left,
                            *self.index.descendants(comparison.left, cst.SimpleString),
                        ]
                    )
                ):
                    return "name"
        if attrs & _NAME_METHODS and strings:
            return "name"
        return None

    def _optional(self, test: cst.BaseExpression, bound: set[str]) -> bool:
        """An operand of the condition is an option, not a test of the entry: a name or
        attribute (negated or not) that mentions none of the loop's names."""
        if not isinstance(test, cst.BooleanOperation):
            return False
        operands: list[cst.BaseExpression] = []
        stack: list[cst.BaseExpression] = [test]
        while stack:
            node = stack.pop()
            if isinstance(node, cst.BooleanOperation):
                stack.extend((node.left, node.right))
            else:
                operands.append(node)
        for operand in operands:
            while isinstance(operand, cst.UnaryOperation) and isinstance(operand.operator, cst.Not):
                operand = operand.expression
            if isinstance(operand, (cst.Name, cst.Attribute)) and not _mentions(operand, bound):
                return True
        return False

    def _writes(self, node: cst.CSTNode) -> bool:
        updates = self.ctx.get(InPlaceUpdates)
        if any(self.index.contains(node, u.node) for u in updates.updates):
            return True
        for call in self.index.descendants(node, cst.Call):
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in _WRITES
            ):
                return True
        return any(
            isinstance(t.target, (cst.Subscript, cst.Attribute))
            for a in self.index.descendants(node, cst.Assign)
            if isinstance(a, cst.Assign)
            for t in a.targets
        )

    def _written_elsewhere(self, update: InPlaceUpdate, loop: cst.For) -> bool:
        """Another loop or call in the same function writes the same copy's entries."""
        shadow = update.shadow_container
        root = _root_name(strip_tensor(shadow)) if shadow is not None else None
        scope = self.index.enclosing(loop, cst.FunctionDef) or self.ctx.module
        for call in self.index.descendants(scope, cst.Call):
            if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
                continue
            if self.index.contains(loop, call):
                continue
            if call.func.attr.value not in _WRITES:
                continue
            if call.func.attr.value == "load_state_dict":
                if root is not None and _root_name(call.func.value) == root:
                    return True
                continue
            # ``e.copy_(p)`` in another loop over the same copy (not over its buffers only:
            # those are not the entries the filter skips).
            other = self.index.enclosing(call, cst.For)
            if (
                other is not None
                and other is not loop
                and not _buffers_only(other.iter)
                and root is not None
                and root
                in {
                    n.value
                    for n in self.index.descendants(other.iter, cst.Name)
                    if isinstance(n, cst.Name)
                }
            ):
                return True
        return False


def _buffers_only(iterated: cst.BaseExpression) -> bool:
    """A loop over ``buffers()`` / ``named_buffers()`` and no other weights."""
    methods = set()
    for node in (iterated, *_calls_in(iterated)):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            methods.add(node.func.attr.value)
    weights = {"parameters", "named_parameters", "state_dict", "items", "values"}
    return bool(methods & {"buffers", "named_buffers"}) and not methods & weights


def _calls_in(node: cst.CSTNode) -> list[cst.Call]:
    found: list[cst.Call] = []
    stack: list[cst.CSTNode] = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Call):
            found.append(current)
        stack.extend(current.children)
    return found


def _continues(statement: cst.If) -> bool:
    body = statement.body
    if not isinstance(body, cst.IndentedBlock) and isinstance(body, cst.SimpleStatementSuite):
        return any(isinstance(s, cst.Continue) for s in body.body)
    for line in body.body:
        if isinstance(line, cst.SimpleStatementLine) and any(
            isinstance(s, cst.Continue) for s in line.body
        ):
            return True
    return False


def _mentions(node: cst.BaseExpression, names: set[str]) -> bool:
    if isinstance(node, cst.Name):
        return node.value in names
    root = _root_name(node)
    return root in names
