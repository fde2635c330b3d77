"""Live weights "backed up" by reference before the averaged weights are loaded over them.

``state_dict()`` returns the module's own tensors, not copies, and ``load_state_dict``
copies into those tensors in place. So a backup made as ``saved = model.state_dict()``
(or a shallow ``dict(...)`` / ``.copy()`` / ``{k: v for ...}`` of it) and followed by
``model.load_state_dict(<averaged weights>)`` is overwritten by the very load it was meant
to survive: the later ``model.load_state_dict(saved)`` "restores" the averaged weights,
and training goes on from them.

A ``ReferenceBackup`` records the backup assignment, the load of averaged weights into the
same model after it (in the same function), and the restores from the backup anywhere in
the module after that load (the restore often sits in another hook:
``on_validation_epoch_end``). The averaged weights are recognised by the averaging objects
of the module or by a name that says average (``ema``, ``swa``, ``shadow``...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import dotted_name
from ema_lint.analysis.syntax.vocabulary import COPY_AVERAGE_WORDS, names_an_average
from ema_lint.analysis.training.swaps import WeightSwaps

_SHALLOW_COPIES = frozenset({"dict", "OrderedDict", "collections.OrderedDict"})


@dataclass(eq=False)
class ReferenceBackup:
    backup: cst.Assign  # saved = model.state_dict()
    saved: str  # the backup's spelling: "saved", "self.cached_weights"
    model: str  # the model's spelling: "model", "self.model"
    state_dict: cst.Call  # the model.state_dict() call inside the backup
    swap_in: cst.Call  # model.load_state_dict(<averaged weights>)
    restores: list[cst.Call] = field(default_factory=list)  # model.load_state_dict(saved)
    back_to_training: bool = False


class ReferenceBackups:
    """The by-reference backups of a module whose restore therefore restores nothing."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.backups: list[ReferenceBackup] = []
        loads = self._loads()
        if not loads:
            return
        objects = ctx.get(AveragingObjects)
        swaps = ctx.get(WeightSwaps)
        for assign in ctx.nodes(cst.Assign):
            found = self._backup(assign)
            if found is None:
                continue
            saved, model, call = found
            function = self.index.enclosing(assign, cst.FunctionDef)
            swap_in = next(
                (
                    load
                    for receiver, arg, load in loads
                    if receiver == model
                    and self.ctx.code(arg) != saved
                    and self.index.is_before(assign, load)
                    and self.index.enclosing(load, cst.FunctionDef) is function
                    and self._averaged(arg, objects)
                ),
                None,
            )
            if swap_in is None:
                continue
            restores = [
                load
                for receiver, arg, load in loads
                if receiver == model
                and self.ctx.code(arg) == saved
                and self.index.is_before(swap_in, load)
            ]
            if not restores:
                continue
            backup = ReferenceBackup(assign, saved, model, call, swap_in, restores)
            backup.back_to_training = swaps.back_to_training(swap_in, function)
            self.backups.append(backup)

    @classmethod
    def build(cls, ctx: FileContext) -> ReferenceBackups:
        return cls(ctx)

    def _loads(self) -> list[tuple[str, cst.BaseExpression, cst.Call]]:
        """Every ``<receiver>.load_state_dict(<arg>, ...)``: receiver spelling, arg, call."""
        found = []
        for call in self.ctx.nodes(cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "load_state_dict"
                and call.args
                and call.args[0].keyword is None
                and call.args[0].star == ""
            ):
                found.append((self.ctx.code(func.value), call.args[0].value, call))
        return found

    def _backup(self, assign: cst.Assign) -> tuple[str, str, cst.Call] | None:
        """``saved = model.state_dict()`` (or a shallow copy of it): the backup's and the
        model's spellings and the ``state_dict()`` call."""
        if len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute)):
            return None
        call = _shallow_state_dict(assign.value)
        if call is None:
            return None
        func = call.func
        assert isinstance(func, cst.Attribute)
        return self.ctx.code(target), self.ctx.code(func.value), call

    def _averaged(self, arg: cst.BaseExpression, objects: AveragingObjects) -> bool:
        """``arg`` holds averaged weights: an averaging object's state, or a name saying so."""
        for node in (arg, *self.index.descendants(arg, (cst.Name, cst.Attribute, cst.Call))):
            if isinstance(node, cst.BaseExpression) and objects.for_expression(node) is not None:
                return True
        return names_an_average(self.ctx.code(arg), COPY_AVERAGE_WORDS)


def _state_dict_call(node: cst.BaseExpression) -> cst.Call | None:
    """``<x>.state_dict()`` with no argument other than ``keep_vars``."""
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "state_dict"
        and all(a.keyword is not None and a.keyword.value == "keep_vars" for a in node.args)
    ):
        return node
    return None


def _shallow_state_dict(value: cst.BaseExpression) -> cst.Call | None:
    """The ``state_dict()`` call when ``value`` shares its tensors: the dict itself, a
    ``dict(...)``/``OrderedDict(...)``/``.copy()`` of it, or a comprehension that keeps each
    value as it is."""
    direct = _state_dict_call(value)
    if direct is not None:
        return direct
    if isinstance(value, cst.Call):
        func = value.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "copy"
            and not value.args
            and (inner := _state_dict_call(func.value)) is not None
        ):
            return inner
        name = dotted_name(func)
        if name in _SHALLOW_COPIES and len(value.args) == 1 and value.args[0].keyword is None:
            return _state_dict_call(value.args[0].value)
    if not isinstance(value, cst.DictComp):
        return None
    target = value.for_in.target
    if not isinstance(target, cst.Tuple) or len(target.elements) != 2:
        return None
    key, item = (e.value for e in target.elements)
    iterated = value.for_in.iter
    if (
        isinstance(iterated, cst.Call)
        and isinstance(iterated.func, cst.Attribute)
        and iterated.func.attr.value == "items"
        and value.key.deep_equals(key)
        and value.value.deep_equals(item)
    ):
        return _state_dict_call(iterated.func.value)
    return None
