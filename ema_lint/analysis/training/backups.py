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
        return _averaged(self.ctx, arg, objects)


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


# Live tensors backed up by reference ------------------------------------------------------
# Methods of a module whose values are its own tensors, with the position of the tensor in
# each element (``named_parameters()`` and ``.items()`` give ``(name, tensor)`` pairs).
_TENSOR_SOURCES = {"parameters": 0, "named_parameters": 1}
_STATE_DICT_VIEWS = {"values": 0, "items": 1}


@dataclass(eq=False)
class TensorBackup:
    """``backup = [p.data for p in model.parameters()]`` (or ``backup[n] = p.data`` in a
    loop over them) before the averaged weights are copied into those very tensors
    (``p.copy_(e)``, ``p.data.copy_(shadow[n])``, ``model.load_state_dict(ema...)``), then
    a copy back from the backup: the backup holds the averaged weights by then."""

    statement: cst.CSTNode  # the Assign, or the ``backup.append(...)`` call
    alias: cst.BaseExpression  # p.data, p, p.detach(): what is stored
    saved: str  # the backup's spelling
    model: str  # the model's spelling
    swap_in: cst.Call
    restores: list[cst.CSTNode] = field(default_factory=list)
    back_to_training: bool = False


class TensorBackups:
    """The backups of a module's live tensors that alias them (``p.data`` kept, not a
    clone) and are overwritten in place by the averaged weights before the restore reads
    them. Rebinding ``p.data = shadow[n]`` instead of copying into it is the pointer swap,
    which keeps the old tensor alive in the backup: not one of these."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.backups: list[TensorBackup] = []
        candidates = self._candidates()
        if not candidates:
            return
        objects = ctx.get(AveragingObjects)
        swaps = ctx.get(WeightSwaps)
        writes = self._writes()
        for statement, alias, saved, model in candidates:
            function = self.index.enclosing(statement, cst.FunctionDef)
            swap_in = next(
                (
                    call
                    for call, target_model, source in writes
                    if target_model == model
                    and self.index.is_before(statement, call)
                    and self.index.enclosing(call, cst.FunctionDef) is function
                    and self._source_root(source) != saved
                    and self._averaged_source(source, objects)
                ),
                None,
            )
            if swap_in is None:
                continue
            restores: list[cst.CSTNode] = [
                node
                for node, source in self._restores(writes)
                if self._source_root(source) == saved and self.index.is_before(swap_in, node)
            ]
            if not restores:
                continue
            found = TensorBackup(statement, alias, saved, model, swap_in, restores)
            found.back_to_training = swaps.back_to_training(swap_in, function)
            self.backups.append(found)

    @classmethod
    def build(cls, ctx: FileContext) -> TensorBackups:
        return cls(ctx)

    # Backups ---------------------------------------------------------------------------------
    def _candidates(self) -> list[tuple[cst.CSTNode, cst.BaseExpression, str, str]]:
        """(statement, alias, backup spelling, model spelling) of each store of live tensor
        aliases: a comprehension over a module's tensors assigned whole, or an item stored
        (``backup[n] = p.data``, ``backup.append(p.data)``) in a loop over them."""
        found: list[tuple[cst.CSTNode, cst.BaseExpression, str, str]] = []
        for assign in self.ctx.nodes(cst.Assign):
            assert isinstance(assign, cst.Assign)
            if len(assign.targets) != 1:
                continue
            target = assign.targets[0].target
            value = assign.value
            if isinstance(target, (cst.Name, cst.Attribute)) and isinstance(
                value, (cst.ListComp, cst.DictComp)
            ):
                element = value.elt if isinstance(value, cst.ListComp) else value.value
                comp = value.for_in
                if comp.inner_for_in is not None:
                    continue
                model = _module_tensors(comp.iter)
                name = _tensor_target(comp.target, comp.iter)
                if model is None or name is None or _alias_of(element) != name:
                    continue
                if _shallow_state_dict(value) is not None:
                    continue  # a state dict kept as it is: a ReferenceBackup
                found.append((assign, element, self.ctx.code(target), model))
            elif isinstance(target, cst.Subscript) and isinstance(
                target.value, (cst.Name, cst.Attribute)
            ):
                loop = self._tensor_loop(assign, value)
                if loop is not None:
                    found.append((assign, value, self.ctx.code(target.value), loop))
        for call in self.ctx.nodes(cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "append"
                and isinstance(func.value, (cst.Name, cst.Attribute))
                and len(call.args) == 1
                and isinstance(self.index.parent(call), cst.Expr)
            ):
                value = call.args[0].value
                loop = self._tensor_loop(call, value)
                if loop is not None:
                    found.append((call, value, self.ctx.code(func.value), loop))
        return found

    def _tensor_loop(self, node: cst.CSTNode, value: cst.BaseExpression) -> str | None:
        """The model whose tensors a loop around ``node`` binds the name ``value`` is an
        alias of (``p.data`` in ``for n, p in model.named_parameters()``)."""
        name = _alias_of(value)
        return self._model_of_loop_tensor(node, name) if name is not None else None

    # Writes into the model's tensors -----------------------------------------------------------
    def _writes(self) -> list[tuple[cst.Call, str, cst.BaseExpression]]:
        """In-place writes into a module's tensors: ``p.copy_(src)`` (``p.data.copy_``) with
        ``p`` a tensor of a loop over the module, and ``model.load_state_dict(src)`` (not
        ``assign=True``, which replaces the tensors instead): call, model, source."""
        found: list[tuple[cst.Call, str, cst.BaseExpression]] = []
        for call in self.ctx.nodes(cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if not isinstance(func, cst.Attribute) or not call.args:
                continue
            first = call.args[0]
            if first.keyword is not None or first.star:
                continue
            if func.attr.value == "load_state_dict":
                if any(
                    a.keyword is not None
                    and a.keyword.value == "assign"
                    and not (isinstance(a.value, cst.Name) and a.value.value == "False")
                    for a in call.args
                ):
                    continue
                found.append((call, self.ctx.code(func.value), first.value))
            elif func.attr.value == "copy_" and len(call.args) <= 2:
                name = _alias_of(func.value)
                model = self._model_of_loop_tensor(call, name) if name else None
                if model is not None:
                    found.append((call, model, first.value))
        return found

    def _model_of_loop_tensor(self, node: cst.CSTNode, name: str) -> str | None:
        """The module whose tensors a loop around ``node`` binds ``name`` to: ``p`` in ``for
        p in model.parameters()`` or ``for p, e in zip(model.parameters(), ...)``."""
        iterable = self._iterable_of(node, name)
        return _module_tensors(iterable) if iterable is not None else None

    def _iterable_of(self, node: cst.CSTNode, name: str) -> cst.BaseExpression | None:
        """What the loop around ``node`` that binds ``name`` runs over (the matching
        ``zip`` argument for a loop over a ``zip``)."""
        for ancestor in self.index.ancestors(node):
            if not isinstance(ancestor, cst.For):
                continue
            iterated = ancestor.iter
            if _tensor_target(ancestor.target, iterated) == name:
                return iterated
            target = ancestor.target
            if (
                isinstance(iterated, cst.Call)
                and isinstance(iterated.func, cst.Name)
                and iterated.func.value == "zip"
                and isinstance(target, (cst.Tuple, cst.List))
                and len(target.elements) == len(iterated.args)
            ):
                for element, arg in zip(target.elements, iterated.args, strict=True):
                    if _tensor_target(element.value, arg.value) == name:
                        return arg.value
        return None

    def _restores(
        self, writes: list[tuple[cst.Call, str, cst.BaseExpression]]
    ) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
        """The writes back into live tensors (``p.copy_(b)``, ``model.load_state_dict(b)``)
        and the rebinding ``p.data = b``: node, source."""
        found: list[tuple[cst.CSTNode, cst.BaseExpression]] = [
            (call, source) for call, _, source in writes
        ]
        for assign in self.ctx.nodes(cst.Assign):
            assert isinstance(assign, cst.Assign)
            target = assign.targets[0].target
            if isinstance(target, cst.Attribute) and target.attr.value == "data":
                found.append((assign, assign.value))
        return found

    def _source_root(self, source: cst.BaseExpression) -> str | None:
        """The spelling of the collection ``source`` reads: ``backup`` for ``backup[n]``
        (``.data``, ``.detach()`` around it), or for a loop variable over ``backup``
        (``zip(model.parameters(), backup)``, ``backup.values()``)."""
        node = source
        while True:
            if isinstance(node, cst.Attribute) and node.attr.value == "data":
                node = node.value
            elif (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("detach", "to", "clone")
            ):
                node = node.func.value
            else:
                break
        if isinstance(node, cst.Subscript):
            return self.ctx.code(node.value)
        if isinstance(node, cst.Name):
            iterable = self._iterable_of(source, node.value)
            if (
                isinstance(iterable, cst.Call)
                and isinstance(iterable.func, cst.Attribute)
                and iterable.func.attr.value in _STATE_DICT_VIEWS
                and not iterable.args
            ):
                return self.ctx.code(iterable.func.value)
            if iterable is not None:
                return self.ctx.code(iterable)
            return node.value
        return self.ctx.code(node)

    def _averaged_source(self, source: cst.BaseExpression, objects: AveragingObjects) -> bool:
        """``source`` holds averaged weights: itself (``self.shadow[n]``, ``ema.state_dict()``)
        or, for a loop variable, what its loop runs over (``ema.parameters()``)."""
        stripped = _alias_root(source)
        if isinstance(stripped, cst.Name):
            iterable = self._iterable_of(source, stripped.value)
            if iterable is not None:
                return _averaged(self.ctx, iterable, objects)
        return _averaged(self.ctx, source, objects)


def _averaged(ctx: FileContext, arg: cst.BaseExpression, objects: AveragingObjects) -> bool:
    """``arg`` holds averaged weights: an averaging object's state, or a name saying so."""
    for node in (arg, *ctx.index.descendants(arg, (cst.Name, cst.Attribute, cst.Call))):
        if isinstance(node, cst.BaseExpression) and objects.for_expression(node) is not None:
            return True
    return names_an_average(ctx.code(arg), COPY_AVERAGE_WORDS)


def _module_tensors(iterable: cst.BaseExpression) -> str | None:
    """The module spelling when ``iterable`` yields its own tensors: ``model.parameters()``,
    ``model.named_parameters()``, ``model.state_dict().values()`` / ``.items()``."""
    if not isinstance(iterable, cst.Call) or not isinstance(iterable.func, cst.Attribute):
        return None
    func = iterable.func
    if func.attr.value in _TENSOR_SOURCES and not iterable.args:
        return _spelling(func.value)
    if func.attr.value in _STATE_DICT_VIEWS and not iterable.args:
        inner = _state_dict_call(func.value)
        if inner is not None:
            assert isinstance(inner.func, cst.Attribute)
            return _spelling(inner.func.value)
    return None


def _spelling(node: cst.BaseExpression) -> str | None:
    return dotted_name(node)


def _tensor_target(target: cst.BaseExpression, iterable: cst.BaseExpression) -> str | None:
    """The name bound to the tensor of each element of ``iterable`` by ``target``: ``p``
    for ``p in model.parameters()``, ``p`` for ``(n, p)``/``n, p`` over ``named_parameters()``
    or ``.items()``."""
    position = 0
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute):
        attr = iterable.func.attr.value
        position = _TENSOR_SOURCES.get(attr, _STATE_DICT_VIEWS.get(attr, 0))
    if position == 0:
        return target.value if isinstance(target, cst.Name) else None
    if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        value = target.elements[1].value
        return value.value if isinstance(value, cst.Name) else None
    return None


def _alias_root(node: cst.BaseExpression) -> cst.BaseExpression:
    """``p.data`` / ``p.detach()`` / ``p.data.detach()`` -> ``p``: views of the same
    storage (a ``clone()`` is not)."""
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = node.value
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "detach"
            and not node.args
        ):
            node = node.func.value
        else:
            return node


def _alias_of(node: cst.BaseExpression) -> str | None:
    """The name ``node`` is a view of (``p``, ``p.data``, ``p.detach()``), or None."""
    root = _alias_root(node)
    return root.value if isinstance(root, cst.Name) else None
