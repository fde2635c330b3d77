"""Whether an averaged copy's parameters are trainable, and whether they reach an optimizer.

The copy's parameters are frozen when the API does it at construction (timm, ultralytics,
ema-pytorch, mmengine), when ``.requires_grad_(False)`` is called on the copy (in the
creation chain or later), or when a loop over its parameters sets ``requires_grad =
False`` (``for p in ema.parameters(): p.requires_grad = False``; MoCo's
``for param_q, param_k in zip(...)``), or detaches them in place (``param.detach_()``).

Its parameters reach an optimizer when an optimizer constructor is given
``ema.parameters()``, a list or chain that includes them, a parameter group with them, a
name bound to any of those, or ``.parameters()`` of a module that holds the copy as a
child (``self.parameters()`` in the class that stores ``self.ema = deepcopy(...)``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.training.modes import ModeTracker

_OPTIMIZER = re.compile(
    r"^(Adam|AdamW|SGD|RMSprop|Adagrad|Adadelta|Adamax|NAdam|RAdam|LBFGS|SparseAdam|ASGD|"
    r"Rprop|Lion|LAMB|Lamb|Adafactor|FusedAdam|FusedLAMB|FusedSGD|AdamW8bit|Adam8bit|"
    r"PagedAdamW|PagedAdamW8bit|Muon|Shampoo|Prodigy|DAdaptAdam|ScheduleFreeAdamW)$"
)
_PARAMETERS = ("parameters", "named_parameters")


@dataclass(frozen=True, eq=False)
class OptimizerReach:
    """An optimizer that is given the copy's parameters."""

    optimizer: cst.Call
    node: cst.Call  # the ``.parameters()`` call that brings them
    how: str  # "direct" (the copy's own parameters) or "child" (a module holding it)
    alone: bool  # the copy's parameters are all the optimizer is given


class TrainableCopies:
    """Freezing and optimizer reach of the module's averaged copies."""

    MAX_DEPTH = 4

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.objects = ctx.get(AveragingObjects)
        self.imports = ctx.get(ImportTable)
        self.resolver = ctx.get(ValueResolver)
        self.optimizers = [c for c in ctx.nodes(cst.Call) if self._is_optimizer(c)]

    @classmethod
    def build(cls, ctx: FileContext) -> TrainableCopies:
        return cls(ctx)

    # Optimizers --------------------------------------------------------------------------------
    def _is_optimizer(self, call: cst.Call) -> bool:
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if not isinstance(name, str) or not _OPTIMIZER.match(name):
            return False
        qualified = self.imports.qualified_names(func)
        return not any(".swa_utils." in q or "keras" in q for q in qualified)

    def _params_argument(self, call: cst.Call) -> cst.BaseExpression | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "params":
                return arg.value
        for arg in call.args:
            if arg.keyword is None and not arg.star:
                return arg.value
        return None

    def _parameter_calls(self, expr: cst.BaseExpression, depth: int = 0) -> Iterator[cst.Call]:
        """``X.parameters()`` calls whose parameters ``expr`` (an optimizer's argument)
        holds, through lists, chains, parameter groups, filters and names."""
        if depth > self.MAX_DEPTH:
            return
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value in _PARAMETERS:
                yield expr
                return
        if isinstance(expr, cst.Name):
            bindings = self.resolver.bindings_of(expr) or []
            for binding in bindings:
                if binding.kind == "assign" and binding.value is not None:
                    yield from self._parameter_calls(binding.value, depth + 1)
            return
        for call in self.index.descendants(expr, cst.Call):
            func = call.func  # type: ignore[attr-defined]
            if isinstance(func, cst.Attribute) and func.attr.value in _PARAMETERS:
                yield call  # type: ignore[misc]
        for name in self.index.descendants(expr, cst.Name):
            parent = self.index.parent(name)
            if isinstance(parent, (cst.Element, cst.StarredElement, cst.BinaryOperation)) or (
                isinstance(parent, cst.Arg) and parent.value is name
            ):
                yield from self._parameter_calls(name, depth + 1)  # type: ignore[arg-type]

    def _optimizer_parameters(self) -> list[tuple[cst.Call, list[cst.Call]]]:
        """Each optimizer with the ``.parameters()`` calls it is given (computed once)."""
        found = getattr(self, "_given", None)
        if found is None:
            found = self._given = []
            for optimizer in self.optimizers:
                params = self._params_argument(optimizer)
                if params is not None:
                    calls = list(dict.fromkeys(self._parameter_calls(params)))
                    found.append((optimizer, calls))
        return found

    def reaches(self, obj: AveragingObject) -> list[OptimizerReach]:
        """Optimizers given the copy's parameters."""
        modes = self.ctx.get(ModeTracker)
        parents = modes.registered_in(obj)
        found: list[OptimizerReach] = []
        for optimizer, calls in self._optimizer_parameters():
            for call in calls:
                owner = call.func.value  # type: ignore[attr-defined]
                if self.objects.for_expression(owner) is obj:
                    found.append(OptimizerReach(optimizer, call, "direct", len(calls) == 1))
                    continue
                cls = None
                if isinstance(owner, cst.Name) and owner.value == "self":
                    cls = self.index.enclosing(call, cst.ClassDef)
                elif isinstance(owner, cst.Name):
                    cls = modes.instance_class(owner)
                if cls is not None and any(cls is p for p in parents):
                    found.append(OptimizerReach(optimizer, call, "child", False))
        return found

    # Freezing ----------------------------------------------------------------------------------
    def frozen(self, obj: AveragingObject) -> bool:
        """The copy's parameters do not require gradients."""
        if obj.spec is not None and obj.spec.frozen_on_init:
            return True
        node: cst.CSTNode = obj.creation
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "requires_grad_" and _false_arg(node):
                return True
            node = node.func.value
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if self._freezing_helper(call, obj):
                return True
            if not isinstance(func, cst.Attribute):
                continue
            if func.attr.value == "requires_grad_" and _false_arg(call):
                if self.objects.for_expression(func.value) is obj:
                    return True
                if self._loop_variable_of(func.value, obj):
                    return True
            elif func.attr.value == "detach_" and self._loop_variable_of(func.value, obj):
                return True
        for assign in self.ctx.nodes(cst.Assign):
            value = assign.value  # type: ignore[attr-defined]
            if not (isinstance(value, cst.Name) and value.value == "False"):
                continue
            for target in assign.targets:  # type: ignore[attr-defined]
                node = target.target
                if (
                    isinstance(node, cst.Attribute)
                    and node.attr.value == "requires_grad"
                    and self._loop_variable_of(node.value, obj)
                ):
                    return True
        return False

    def _freezing_helper(self, call: cst.Call, obj: AveragingObject) -> bool:
        """``set_requires_grad(target, False)``, ``freeze(ema)``, ``freeze_model(teacher)``."""
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if not isinstance(name, str):
            return False
        lowered = name.lower()
        freezing = "freeze" in lowered or (
            "requires_grad" in lowered
            and any(isinstance(a.value, cst.Name) and a.value.value == "False" for a in call.args)
        )
        if not freezing or lowered == "requires_grad_":
            return False
        return any(not a.star and self.objects.for_expression(a.value) is obj for a in call.args)

    def _loop_variable_of(self, expr: cst.BaseExpression, obj: AveragingObject) -> bool:
        """``p`` in ``for p in ema.parameters():`` or ``param_k`` in
        ``for param_q, param_k in zip(a.parameters(), ema.parameters()):``."""
        if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
            expr = expr.value
        if not isinstance(expr, cst.Name):
            return False
        for loop in self.ctx.nodes(cst.For):
            if not self.index.contains(loop, expr):
                continue
            target, iterable = loop.target, loop.iter  # type: ignore[attr-defined]
            sources: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
            if isinstance(target, cst.Name):
                sources.append((target, iterable))
            elif (
                isinstance(target, cst.Tuple)
                and isinstance(iterable, cst.Call)
                and dotted_name(iterable.func) == "zip"
            ):
                for element, arg in zip(target.elements, iterable.args, strict=False):
                    sources.append((element.value, arg.value))
            for name, source in sources:
                if not (isinstance(name, cst.Name) and name.value == expr.value):
                    continue
                if (
                    isinstance(source, cst.Call)
                    and isinstance(source.func, cst.Attribute)
                    and source.func.attr.value in _PARAMETERS
                    and self.objects.for_expression(source.func.value) is obj
                ):
                    return True
        return False


def _false_arg(call: cst.Call) -> bool:
    return (
        bool(call.args)
        and isinstance(call.args[0].value, cst.Name)
        and call.args[0].value.value == "False"
    )
