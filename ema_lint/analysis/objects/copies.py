"""Weight copies that copy nothing: a loop variable rebound, a ``state_dict(...)`` that loads.

Initialising an average from the model (or syncing it back) is a copy, not an update, and
it fails in the same silent ways:

- ``for p, e in zip(model_params, ema_params): p = e`` (or ``= e.clone()``, ``= e.data``)
  rebinds the loop variable; no tensor changes, so the average starts from its own
  initialisation instead of the model's weights;
- ``ema_sd[k] = v.clone()`` with ``ema_sd = ema.state_dict()`` never loaded back replaces
  an entry of a temporary dict: the average's tensors keep their own values;
- ``ema.state_dict(model.state_dict())`` reads like a load but ``state_dict``'s first
  positional argument is the *destination*: it writes the average's tensors into a
  temporary dict and loads nothing (``load_state_dict`` was meant).

Both are judged only on weights: the loop runs over two sequences of a module's tensors
(``parameters()``, ``state_dict()``, ``buffers()``, lists bound from them), and a name on
one side says it is an average.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.updates import InPlaceUpdates, strip_tensor
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.vocabulary import names_an_average

# What a rebinding may wrap its source in and still be a copy of it.
_COPY_METHODS = frozenset({"clone", "detach", "data", "float", "to", "cuda", "cpu"})


@dataclass(eq=False)
class LoopRebind:
    assign: cst.Assign  # p = e
    loop: cst.For
    target: str  # the rebound loop variable
    source: str  # the other loop variable


class NoOpCopies:
    """The weight copies of a module that change no tensor."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.rebinds: list[LoopRebind] = []
        self.state_dict_loads: list[cst.Call] = []
        # ``ema_sd[k] = v.clone()`` into a ``state_dict()`` dict that is never loaded back.
        self.entry_copies: list[cst.Assign] = []
        for loop in ctx.nodes(cst.For):
            assert isinstance(loop, cst.For)
            self._loop(loop)
            self._entries(loop)
        for call in ctx.nodes(cst.Call):
            assert isinstance(call, cst.Call)
            if self._state_dict_as_load(call):
                self.state_dict_loads.append(call)

    @classmethod
    def build(cls, ctx: FileContext) -> NoOpCopies:
        return cls(ctx)

    # Rebinding a loop variable -------------------------------------------------------------------
    def _loop(self, loop: cst.For) -> None:
        pair = _zip_pair(loop)
        if pair is None:
            return
        (first, second), iterables = pair
        if not any(names_an_average(self.ctx.code(n)) for n in (first, second, *iterables)):
            return
        updates = self.ctx.get(InPlaceUpdates)
        if not all(updates.container(it)[1] is not None for it in iterables):
            return  # not two sequences of a module's tensors
        names = {first.value, second.value}
        for statement in loop.body.body if isinstance(loop.body, cst.IndentedBlock) else ():
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                target = small.targets[0].target
                source = _copied_name(small.value)
                if (
                    isinstance(target, cst.Name)
                    and target.value in names
                    and source in names
                    and source != target.value
                    and not self._read_after(loop, small, target.value)
                ):
                    self.rebinds.append(LoopRebind(small, loop, target.value, source))

    def _entries(self, loop: cst.For) -> None:
        """``sd[k] = v`` (``v.clone()``, ``live[k]``) in a loop, ``sd`` a dict of an
        average's ``state_dict()`` that nothing loads back."""
        if not isinstance(loop.body, cst.IndentedBlock):
            return
        updates = self.ctx.get(InPlaceUpdates)
        for statement in loop.body.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                target = small.targets[0].target
                if not isinstance(target, cst.Subscript) or not isinstance(target.value, cst.Name):
                    continue
                value = small.value
                copied = _copied_name(value) is not None or isinstance(
                    strip_tensor(value), cst.Subscript
                )
                if not copied or any(u.node is small for u in updates.updates):
                    continue
                container, method = updates.container(target.value)
                if method != "state_dict" or not names_an_average(self.ctx.code(container)):
                    continue
                if updates.dead_entry(target) == "state_dict":
                    self.entry_copies.append(small)

    def _read_after(self, loop: cst.For, assign: cst.Assign, name: str) -> bool:
        """Whether ``name`` is read in the loop body after ``assign`` (then it is used)."""
        for node in self.index.descendants(loop.body, cst.Name):
            assert isinstance(node, cst.Name)
            if node.value != name or not self.index.is_before(assign, node):
                continue
            if self.index.contains(assign, node):
                continue
            return True
        return False

    # state_dict(...) for load_state_dict(...) -------------------------------------------------
    def _state_dict_as_load(self, call: cst.Call) -> bool:
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and func.attr.value == "state_dict"
            and call.args
            and call.args[0].keyword is None
            and not call.args[0].star
        ):
            return False
        if not isinstance(self.index.parent(call), cst.Expr):
            return False  # the destination dict is used: a deliberate (deprecated) call
        return names_an_average(self.ctx.code(call))


def _zip_pair(
    loop: cst.For,
) -> tuple[tuple[cst.Name, cst.Name], tuple[cst.BaseExpression, ...]] | None:
    """``for a, b in zip(x, y)`` (or ``for (_, a), (_, b) in zip(...)`` over
    ``named_parameters()``): the two names and the two iterables."""
    target = loop.target
    iterated = loop.iter
    if not (
        isinstance(target, cst.Tuple)
        and len(target.elements) == 2
        and isinstance(iterated, cst.Call)
        and isinstance(iterated.func, cst.Name)
        and iterated.func.value == "zip"
        and len(iterated.args) == 2
        and all(a.keyword is None and not a.star for a in iterated.args)
    ):
        return None
    names = [_tensor_name(e.value) for e in target.elements]
    first, second = names
    if first is None or second is None:
        return None
    return (first, second), tuple(a.value for a in iterated.args)


def _tensor_name(element: cst.BaseExpression) -> cst.Name | None:
    """``e`` -> e; ``(name, e)`` -> e (the tensor of a named pair)."""
    if isinstance(element, cst.Name):
        return element
    if (
        isinstance(element, (cst.Tuple, cst.List))
        and len(element.elements) == 2
        and isinstance(element.elements[1].value, cst.Name)
    ):
        return element.elements[1].value
    return None


def _copied_name(value: cst.BaseExpression) -> str | None:
    """``e``, ``e.clone()``, ``e.data``, ``e.detach().clone()``: the name copied, else None."""
    node = value
    while True:
        if isinstance(node, cst.Name):
            return node.value
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not node.args:
            if node.func.attr.value not in _COPY_METHODS:
                return None
            node = node.func.value
            continue
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = node.value
            continue
        stripped = strip_tensor(node)
        if stripped is node:
            return None
        node = stripped
