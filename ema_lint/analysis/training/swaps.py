"""Swapping averaged weights into the live model: ``store()``, ``copy_to()``, ``restore()``.

diffusers ``EMAModel``, torch-ema and CompVis ``LitEma`` evaluate the average by copying it
into the live model: ``ema.store(params)`` saves the live weights, ``ema.copy_to(params)``
overwrites them with the average, ``ema.restore(params)`` puts the live weights back. A
swap that reaches training again without the restore trains on from the averaged weights.

A ``Swap`` is a ``copy_to`` preceded by a ``store`` of the same object in the same
function. Its restore is *missing* when no ``restore`` of the object follows it in the
function (and none exists elsewhere in the module, which would be a deliberate pairing
across hooks such as Lightning's ``on_validation_start`` / ``on_validation_end``), and
*skipped* when one follows but some path avoids it: a ``return``, ``continue`` or
``break`` between them, a restore only in an ``except`` handler or under a condition the
swap is not under. ``back_to_training`` says whether the swap runs inside the training
loop (directly or through the functions it calls) or in a Lightning hook after which
training goes on.

A ``SwapIn`` is any call that puts the averaged weights into the live model for use,
with or without a ``store``: ``ema.copy_to(model.parameters())``, ``ema.apply_shadow()``
(a project class's swap), ``ema.set(model)``, ``with ema.average_parameters():``. Its
``model`` is the live model that then holds the average (the owner of the parameters
passed, or the model the object was made from when none are), and its ``region`` is
where the live model holds the average: the statements after the call up to the next
restore of the object in the same function (or the ``with`` body).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.index import ModuleIndex
from ema_lint.analysis.syntax.names import dotted_name
from ema_lint.analysis.training.framework import FrameworkHooks
from ema_lint.analysis.training.loops import TrainingLoops

# Methods that copy the average into the live model (when the object's spec lists them).
SWAP_IN_METHODS = ("copy_to", "apply_shadow", "apply", "swap", "swap_in", "set")
_CONTEXT_SWAPS = ("average_parameters",)
# The swap methods of a class of the module (``apply``/``set`` are too common to tell one).
LOCAL_SWAP_METHODS = ("apply_shadow", "copy_to", "swap", "swap_in")
_END_HOOKS = ("on_train_end", "on_fit_end", "teardown", "on_test_", "test_", "on_predict_")


@dataclass(eq=False)
class Swap:
    obj: AveragingObject
    store: cst.Call
    copy_to: cst.Call
    function: cst.FunctionDef | None
    restores: list[cst.Call] = field(default_factory=list)  # restores after copy_to in the function
    missing: bool = False
    # The return/continue/break (or the restore's branch) that lets a path avoid the restore.
    skipped_by: cst.CSTNode | None = None
    back_to_training: bool = False


@dataclass(eq=False)
class SwapIn:
    """The averaged weights of ``obj`` put into the live model ``model`` by ``call``."""

    obj: AveragingObject
    call: cst.Call
    model: cst.BaseExpression
    function: cst.FunctionDef | None
    restore: cst.Call | None = None  # the first restore after it in the same function
    block: cst.With | None = None  # ``with ema.average_parameters():``

    def holds(self, index: ModuleIndex, node: cst.CSTNode) -> bool:
        """``node`` runs while the live model holds the average."""
        if self.block is not None:
            return index.contains(self.block.body, node)
        if not index.is_before(self.call, node) or index.contains(self.call, node):
            return False
        return self.restore is None or index.is_before(node, self.restore)


class WeightSwaps:
    """The store/copy_to swaps of a module and whether each is undone."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.loops = ctx.get(TrainingLoops)
        self.swaps: list[Swap] = []
        objects = ctx.get(AveragingObjects)
        for obj in objects.objects:
            spec = obj.spec
            if spec is None or not spec.store_methods or not spec.restore_methods:
                continue
            calls = self._method_calls(obj, objects)
            stores = calls.get("store", [])
            restores = calls.get("restore", [])
            for copy_to in calls.get("copy_to", []):
                fn = self.loops.function_of(copy_to)
                store = next(
                    (
                        s
                        for s in reversed(stores)
                        if self.loops.function_of(s) is fn and self.index.is_before(s, copy_to)
                    ),
                    None,
                )
                if store is None:
                    continue  # a one-way swap (export at the end), not a store/restore pair
                self.swaps.append(self._swap(obj, store, copy_to, fn, restores))
        self.swap_ins: list[SwapIn] = []
        for obj in objects.objects:
            self.swap_ins.extend(self._swap_ins(obj, objects))
        self.swap_ins.extend(self._local_class_swap_ins(objects))

    @classmethod
    def build(cls, ctx: FileContext) -> WeightSwaps:
        return cls(ctx)

    def _method_calls(
        self, obj: AveragingObject, objects: AveragingObjects
    ) -> dict[str, list[cst.Call]]:
        spec = obj.spec
        assert spec is not None
        kinds = {name: "store" for name in spec.store_methods}
        kinds.update({name: "restore" for name in spec.restore_methods})
        kinds["copy_to"] = "copy_to"
        found: dict[str, list[cst.Call]] = {}
        for call in self._calls_of(tuple(kinds)):
            func = call.func
            assert isinstance(func, cst.Attribute)
            if objects.for_expression(func.value) is obj:
                found.setdefault(kinds[func.attr.value], []).append(call)
        return found

    def _swap_ins(self, obj: AveragingObject, objects: AveragingObjects) -> list[SwapIn]:
        spec = obj.spec
        if spec is None:
            return []
        methods = [m for m in spec.apply_methods if m in SWAP_IN_METHODS or m in _CONTEXT_SWAPS]
        if not methods:
            return []
        restores = [
            c
            for c in self._calls_of(spec.restore_methods or ("restore",))
            if objects.for_expression(c.func.value) is obj  # type: ignore[attr-defined]
        ]
        found: list[SwapIn] = []
        for call in self._calls_of(tuple(methods)):
            func = call.func
            assert isinstance(func, cst.Attribute)
            if objects.for_expression(func.value) is not obj:
                continue
            model = self._live_model(call, obj)
            if model is None:
                continue
            fn = self.loops.function_of(call)
            block = None
            if func.attr.value in _CONTEXT_SWAPS:
                item = self.index.parent(call)
                block = self.index.parent(item) if isinstance(item, cst.WithItem) else None
                if not isinstance(block, cst.With):
                    continue
            restore = next(
                (
                    r
                    for r in restores
                    if self.loops.function_of(r) is fn and self.index.is_before(call, r)
                ),
                None,
            )
            found.append(SwapIn(obj, call, model, fn, restore, block))
        return found

    def _local_class_swap_ins(self, objects: AveragingObjects) -> list[SwapIn]:
        """``ema = EMA(model, 0.999)`` ... ``ema.apply_shadow()`` with ``EMA`` a class of this
        module that keeps an average (its shadow is an averaging object) and has a swap
        method and ``restore``: the live model is the first argument of the constructor."""
        classes: dict[str, tuple[cst.ClassDef, AveragingObject]] = {}
        for cls in self.ctx.nodes(cst.ClassDef):
            assert isinstance(cls, cst.ClassDef)
            methods = {f.name.value for f in cls.body.body if isinstance(f, cst.FunctionDef)}
            if "restore" not in methods or not methods & set(LOCAL_SWAP_METHODS):
                continue
            held = next((o for o in objects.objects if self.index.contains(cls, o.creation)), None)
            if held is not None:
                classes[cls.name.value] = (cls, held)
        if not classes:
            return []
        from ema_lint.analysis.syntax.values import ValueResolver

        resolver = self.ctx.get(ValueResolver)
        found: list[SwapIn] = []
        for call in self._calls_of(LOCAL_SWAP_METHODS):
            receiver = call.func.value  # type: ignore[attr-defined]
            if not isinstance(receiver, cst.Name) or call.args:
                continue
            bindings = resolver.bindings_of(receiver) or []
            values = {id(b.value): b.value for b in bindings if b.value is not None}
            if len(values) != 1:
                continue
            [made] = values.values()
            if not (
                isinstance(made, cst.Call)
                and isinstance(made.func, cst.Name)
                and made.func.value in classes
                and made.args
                and made.args[0].keyword is None
                and not made.args[0].star
            ):
                continue
            cls, held = classes[made.func.value]
            if self.index.contains(cls, call):
                continue
            model = made.args[0].value
            if not isinstance(model, (cst.Name, cst.Attribute)):
                continue
            fn = self.loops.function_of(call)
            restore = next(
                (
                    r
                    for r in self.index.method_calls("restore")
                    if self.loops.function_of(r) is fn
                    and self.index.is_before(call, r)
                    and self.ctx.code(r.func.value) == receiver.value  # type: ignore[attr-defined]
                ),
                None,
            )
            found.append(SwapIn(held, call, model, fn, restore))
        return found

    def _live_model(self, call: cst.Call, obj: AveragingObject) -> cst.BaseExpression | None:
        """The live model the call copies the average into: ``model`` for
        ``copy_to(model.parameters())`` or ``set(model)``, the object's source when the
        call names none (``ema.apply_shadow()``)."""
        args = [a for a in call.args if not a.star]
        target = args[0].value if args else obj.source
        if target is None or len(args) > 1:
            return None
        if (
            isinstance(target, cst.Call)
            and isinstance(target.func, cst.Attribute)
            and target.func.attr.value in ("parameters", "named_parameters")
            and not target.args
        ):
            target = target.func.value
        if not isinstance(target, (cst.Name, cst.Attribute)) or dotted_name(target) is None:
            return None
        if isinstance(target, cst.Attribute) and target.attr.value in ("data", "shape"):
            return None
        return target

    def _calls_of(self, methods: tuple[str, ...]) -> list[cst.Call]:
        """Calls of any of ``methods`` in document order (from the index's table)."""
        calls = [c for m in dict.fromkeys(methods) for c in self.index.method_calls(m)]
        calls.sort(key=lambda c: self.index.order[id(c)])
        return calls

    def _swap(
        self,
        obj: AveragingObject,
        store: cst.Call,
        copy_to: cst.Call,
        fn: cst.FunctionDef | None,
        restores: list[cst.Call],
    ) -> Swap:
        after = [
            r
            for r in restores
            if self.loops.function_of(r) is fn and self.index.is_before(copy_to, r)
        ]
        swap = Swap(obj, store, copy_to, fn, after)
        swap.back_to_training = self.back_to_training(copy_to, fn)
        if not after:
            swap.missing = not any(self.loops.function_of(r) is not fn for r in restores)
            return swap
        covering = [r for r in after if self._covers(r, copy_to, fn)]
        if not covering:
            swap.skipped_by = after[0]
            return swap
        swap.skipped_by = self._exit_between(copy_to, covering[0], fn)
        return swap

    def _covers(self, restore: cst.Call, copy_to: cst.Call, fn: cst.CSTNode | None) -> bool:
        """``restore`` runs whenever ``copy_to`` did: it is not in an ``except`` handler, and
        every condition around it that is not around ``copy_to`` repeats one that is."""
        tests = {
            self.ctx.code(a.test)
            for a in self.index.ancestors(copy_to)
            if isinstance(a, cst.If) and self.index.contains(a.body, copy_to)
        }
        for ancestor in self.index.ancestors(restore):
            if ancestor is fn:
                break
            if self.index.contains(ancestor, copy_to):
                continue
            if isinstance(ancestor, cst.ExceptHandler):
                return False
            if (
                isinstance(ancestor, cst.If)
                and self.index.contains(ancestor.body, restore)
                and self.ctx.code(ancestor.test) not in tests
            ):
                return False
            if isinstance(ancestor, cst.Else):
                return False
        return True

    def _exit_between(
        self, copy_to: cst.Call, restore: cst.Call, fn: cst.CSTNode | None
    ) -> cst.CSTNode | None:
        """A ``return``/``continue``/``break`` after the swap that leaves before the restore."""
        start, end = self.index.order[id(copy_to)], self.index.order[id(restore)]
        for kind in (cst.Return, cst.Continue, cst.Break):
            for node in self.ctx.nodes(kind):
                position = self.index.order[id(node)]
                if not start < position < end or self.loops.function_of(node) is not fn:
                    continue
                if self._protected(node, restore):
                    continue
                if kind is cst.Return:
                    return node
                loop = self.index.enclosing(node, cst.For, cst.While, cst.FunctionDef)
                if loop is not None and self.index.contains(loop, restore):
                    return node
        return None

    def _protected(self, node: cst.CSTNode, restore: cst.Call) -> bool:
        """``node`` is inside a ``try`` whose ``finally`` runs the restore."""
        for ancestor in self.index.ancestors(node):
            if (
                isinstance(ancestor, cst.Try)
                and ancestor.finalbody is not None
                and self.index.contains(ancestor.finalbody, restore)
            ):
                return True
        return False

    def back_to_training(self, node: cst.CSTNode, fn: cst.FunctionDef | None) -> bool:
        if self.loops.anchors(node):
            return True
        hooks = self.ctx.get(FrameworkHooks)
        for hook, _ in hooks.hooks_reaching(node):
            if not hook.name.value.startswith(_END_HOOKS):
                return True
        return False
