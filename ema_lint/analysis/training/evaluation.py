"""Where an averaged model copy is evaluated, and where code would go before it.

An evaluation of a copy is either a call that *passes* it to an evaluation function of
the module (``evaluate(ema_model, val_loader)``, ``validate(model_ema.module, ...)``: one
named for validation that runs its parameter, or one that runs it in a validation context,
without setting its mode itself; an imported ``evaluate`` is not judged, its body is not
here) or a call of the copy itself (``ema(x)``, ``ema.module(x)``) in a validation
context: a ``torch.no_grad()`` / ``inference_mode()`` block, a loop over a validation
loader, a function named or decorated for evaluation; or anywhere, when its output is
taken to the host as data (``G_ema(z).cpu()``, ``.numpy()``, ``.item()``) or when it is a
sampling method of the copy or its inner model (``ema.sample(...)``,
``ema.module.generate(...)``, ``predict``, ``infer``, ``decode``), unless that call feeds a
training loss. The Lightning ``trainer.validate``
family is not counted (Lightning sets the mode itself), nor are uses of teachers.

For each use, ``before`` is the statement before which a mode switch belongs: the outermost
no-grad block or validation loop around the use in its function, or the use's own
statement; ``top_of`` is the evaluation function whose first statement can set the mode of
its parameter when every caller passes it an averaged copy.

``swapped`` holds the evaluations of averaged weights swapped into the live model
(``ema.copy_to(model.parameters())``, ``ema.apply_shadow()``, ``with
ema.average_parameters():``, see ``swaps.SwapIn``): the first evaluation of that live
model (run in a validation context, sampled, or passed to an evaluation function of the
module or the project) while it holds the average. Its mode is the live model's, which
``ModeTracker.live_mode_at`` tells only from the code's own ``.train()`` / ``.eval()``
calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.apis import ApiSpec
from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects, Use
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.training.loops import TrainingLoops
from ema_lint.analysis.training.modes import ModeTracker
from ema_lint.analysis.training.swaps import SwapIn, WeightSwaps

from ..syntax.params import all_params

_RUNNERS = ("trainer", "runner")
# Methods that run a model for inference: sampling from a generative model, prediction.
_SAMPLING = {"sample", "generate", "predict", "infer", "decode"}
# Methods that turn an output into host data.
_TO_HOST = {"cpu", "numpy", "item", "tolist"}
# Attributes of a wrapper that hold the averaged model (``ema.module(x)`` runs it).
_INNER_MODELS = {"module", "ema", "ema_model", "averaged_model", "model", "shadow"}


@dataclass(frozen=True, eq=False)
class Evaluation:
    """One evaluation of an averaged copy."""

    obj: AveragingObject
    node: cst.Call  # the evaluating call: evaluate(ema, ...) or ema(x)
    expr: cst.BaseExpression  # the copy as the code refers to it at the use
    kind: str  # "passed" or "called"
    before: cst.BaseStatement  # the statement a mode switch goes before
    # For "passed" to a local function: the function, the parameter, and whether every
    # caller of it passes an averaged copy there (then its top is the place for the switch).
    callee: cst.FunctionDef | None = None
    param: str | None = None
    top_of: cst.FunctionDef | None = None
    # For evaluations of weights swapped into the live model: the swap.
    swap: SwapIn | None = None


class EvaluationSites:
    """The evaluations of the module's averaged model copies."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.objects = ctx.get(AveragingObjects)
        self.loops = ctx.get(TrainingLoops)
        self.modes = ctx.get(ModeTracker)
        self.evaluations: list[Evaluation] = []
        self._evaluates: dict[tuple[int, str], bool] = {}
        self._evaluating: dict[tuple[int, str | None, int], tuple[cst.FunctionDef, str] | None] = {}
        self.swapped: list[Evaluation] = []
        if self.objects.objects:
            for swap in ctx.get(WeightSwaps).swap_ins:
                found = self._swapped(swap)
                if found is not None:
                    self.swapped.append(found)
        candidates = [
            o
            for o in self.objects.objects
            if o.use in (Use.EVAL, Use.UNKNOWN) and self.modes.tracked(o)
        ]
        if not candidates:
            return
        for call in ctx.nodes(cst.Call):
            self._passed(call)
            self._called(call)

    @classmethod
    def build(cls, ctx: FileContext) -> EvaluationSites:
        return cls(ctx)

    def of(self, obj: AveragingObject) -> list[Evaluation]:
        return [e for e in self.evaluations if e.obj is obj]

    # Kinds of use -----------------------------------------------------------------------------
    def _object(self, expr: cst.BaseExpression) -> AveragingObject | None:
        obj = self.objects.for_expression(expr)
        if obj is None or obj.use not in (Use.EVAL, Use.UNKNOWN) or not self.modes.tracked(obj):
            return None
        return obj

    def _passed(self, call: cst.Call) -> None:
        func = call.func
        if isinstance(func, cst.Attribute):
            receiver = func.value
            last = receiver.attr.value if isinstance(receiver, cst.Attribute) else None
            if isinstance(receiver, cst.Name):
                last = receiver.value
            if last and any(word in last.lower() for word in _RUNNERS):
                return  # trainer.validate(model): the framework sets the mode
        targets = self.loops.local_targets(call)
        for position, arg in enumerate(call.args):
            if arg.star:
                continue
            obj = self._object(arg.value)
            if obj is None or self.objects.for_expression(func) is obj:
                continue
            # Only functions of the module: an imported ``evaluate`` usually calls
            # ``model.eval()`` itself, and its body cannot be read from here.
            evaluating = self._evaluating_target(targets, arg, position)
            if evaluating is not None:
                self._add(obj, call, arg.value, "passed", *evaluating)
            else:
                # A helper of another module of the project, judged by its summary.
                param = self._project_evaluator_param(call, targets, arg, position)
                if param is not None:
                    self._add(obj, call, arg.value, "passed", None, param)

    def _project_evaluator_param(
        self, call: cst.Call, targets: list, arg: cst.Arg, position: int
    ) -> str | None:
        """The parameter ``arg`` binds of an evaluation helper in another module of the
        project (by its summary), when the helper evaluates that parameter without setting
        its mode; None otherwise (or when the call has local targets)."""
        project = self.ctx.project
        helper = project.evaluator(call) if not targets and project else None
        if helper is None:
            return None
        if arg.keyword is not None:
            param = arg.keyword.value
        else:
            param = helper.params[position] if position < len(helper.params) else None
        return param if param is not None and param in helper.unmoded else None

    def _evaluating_target(
        self, targets: list[cst.FunctionDef], arg: cst.Arg, position: int
    ) -> tuple[cst.FunctionDef, str] | None:
        """The first of ``targets`` that evaluates the parameter ``arg`` binds, with it.
        Calls of one name share their list of targets: asked once per list and argument
        slot, not once per call (copies of a script call many same-named functions)."""
        if not targets:
            return None
        key = (id(targets), arg.keyword.value if arg.keyword is not None else None, position)
        if key in self._evaluating:
            return self._evaluating[key]
        found = None
        for target in targets:
            param = self.modes.param_name(target, arg, position)
            if param is None or not self._evaluates_param(target, param):
                continue
            found = (target, param)
            break
        self._evaluating[key] = found
        return found

    def evaluates_param(self, fn: cst.FunctionDef, param: str) -> bool:
        """Whether ``fn`` evaluates its parameter ``param`` without setting its mode (what a
        module's summary tells importers about its evaluation helpers)."""
        return self._evaluates_param(fn, param)

    def _evaluates_param(self, fn: cst.FunctionDef, param: str) -> bool:
        """``fn`` runs its parameter ``param`` in a validation context, or is named for
        evaluation and runs it, without setting its mode itself."""
        key = (id(fn), param)
        found = self._evaluates.get(key)
        if found is None:
            found = self._evaluates[key] = self._find_evaluates_param(fn, param)
        return found

    def _find_evaluates_param(self, fn: cst.FunctionDef, param: str) -> bool:
        if self.modes.param_sets_mode(fn, param) is not None:
            return False
        named = self.loops.is_validation_function(fn)
        for call in self.index.descendants(fn, cst.Call):
            root = self._root(call.func)  # type: ignore[attr-defined]
            if root != param:
                continue
            if named or self.loops.is_validation_context(call):
                return True
        return False

    def _root(self, expr: cst.BaseExpression) -> str | None:
        """``net`` for ``net``, ``net.module``, ``net.forward`` (a call of the model)."""
        node = expr
        while isinstance(node, cst.Attribute) and node.attr.value in ("module", "forward", "ema"):
            node = node.value
        return node.value if isinstance(node, cst.Name) else None

    def _called(self, call: cst.Call) -> None:
        func = call.func
        sampling = False
        method = ""
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            func = func.value
        elif isinstance(func, cst.Attribute) and func.attr.value in _SAMPLING:
            func, sampling, method = func.value, True, func.attr.value
        if not isinstance(func, (cst.Name, cst.Attribute)):
            return
        obj = self._object(func)
        if obj is None:
            return
        if method and obj.spec is not None and method in _api_methods(obj.spec):
            return  # the API's own method (SWAG's ``sample()`` swaps weights in), no output
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value not in _INNER_MODELS
            and self.objects.for_expression(func.value) is obj
        ):
            return  # a method of the copy (``ema.to(...)``), not a call of the model
        if not (sampling or self._output_to_host(call) or self.loops.is_validation_context(call)):
            return
        if (sampling or not self.loops.is_validation_context(call)) and call in (
            self.objects.loss_inputs(obj)
        ):
            return  # part of a training loss, not an evaluation
        root = func
        while isinstance(root, cst.Attribute):
            root = root.value
        fn = self.loops.function_of(call)
        if (
            isinstance(root, cst.Name)
            and root.value not in ("self", "cls")
            and fn is not None
            and self._is_param(fn, root.value)
            and self.loops.callers(fn)
        ):
            return  # judged where callers pass it
        self._add(obj, call, func, "called")

    def _output_to_host(self, call: cst.Call) -> bool:
        """The output is taken off the device as data (``ema(z).cpu()``, ``.numpy()``,
        ``.item()``, ``.tolist()``): images or numbers to look at, not a training input."""
        parent = self.index.parent(call)
        return (
            isinstance(parent, cst.Attribute)
            and parent.value is call
            and parent.attr.value in _TO_HOST
            and isinstance(self.index.parent(parent), cst.Call)
        )

    def _is_param(self, fn: cst.FunctionDef, name: str) -> bool:
        params = all_params(fn.params)
        return any(p.name.value == name for p in params)

    # Averaged weights swapped into the live model --------------------------------------------
    def _swapped(self, swap: SwapIn) -> Evaluation | None:
        """The first evaluation of the live model while it holds the swapped-in average."""
        code = self.ctx.code(swap.model)
        scope = swap.function if swap.function is not None else self.ctx.module
        for call in self.index.descendants(scope, cst.Call):
            if (
                not swap.holds(self.index, call)
                or self.loops.function_of(call) is not swap.function
            ):
                continue
            found = self._swapped_use(call, code)
            if found is None:
                continue
            kind, expr, callee, param = found
            before = self._before(call)
            if before is None:
                return None
            return Evaluation(swap.obj, call, expr, kind, before, callee, param, None, swap)
        return None

    def _swapped_use(
        self, call: cst.Call, code: str
    ) -> tuple[str, cst.BaseExpression, cst.FunctionDef | None, str | None] | None:
        func = call.func
        sampling = False
        if isinstance(func, cst.Attribute) and func.attr.value == "forward":
            func = func.value
        elif isinstance(func, cst.Attribute) and func.attr.value in _SAMPLING:
            func, sampling = func.value, True
        if self.ctx.code(func) == code and (sampling or self.loops.is_validation_context(call)):
            return "called", func, None, None
        if isinstance(func, cst.Attribute) and self._is_runner(func.value):
            return None
        targets = self.loops.local_targets(call)
        for position, arg in enumerate(call.args):
            if arg.star or self.ctx.code(arg.value) != code:
                continue
            evaluating = self._evaluating_target(targets, arg, position)
            if evaluating is not None:
                return "passed", arg.value, evaluating[0], evaluating[1]
            param = self._project_evaluator_param(call, targets, arg, position)
            if param is not None:
                return "passed", arg.value, None, param
        return None

    def _is_runner(self, receiver: cst.BaseExpression) -> bool:
        last = receiver.attr.value if isinstance(receiver, cst.Attribute) else None
        if isinstance(receiver, cst.Name):
            last = receiver.value
        return bool(last) and any(word in last.lower() for word in _RUNNERS)

    # Where the switch goes --------------------------------------------------------------------
    def _add(
        self,
        obj: AveragingObject,
        call: cst.Call,
        expr: cst.BaseExpression,
        kind: str,
        callee: cst.FunctionDef | None = None,
        param: str | None = None,
    ) -> None:
        before = self._before(call, expr)
        if before is None:
            return
        top_of = None
        if (
            callee is not None
            and param is not None
            and self._all_callers_pass_copies(callee, param)
        ):
            top_of = callee
        self.evaluations.append(Evaluation(obj, call, expr, kind, before, callee, param, top_of))

    def _before(
        self, node: cst.CSTNode, expr: cst.BaseExpression | None = None
    ) -> cst.BaseStatement | None:
        """The statement a mode switch of ``expr`` goes before: never above the loop or
        ``with`` that binds its name (``for net, suffix in ema.get():``)."""
        statement = self.index.statement(node)
        if not isinstance(statement, cst.BaseStatement):
            return None
        fn = self.loops.function_of(node)
        root = expr
        while isinstance(root, cst.Attribute):
            root = root.value
        name = root.value if isinstance(root, cst.Name) else None
        best = statement
        for ancestor in self.index.ancestors(statement):
            if ancestor is fn or isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Module)):
                break
            if name is not None and name in _bound_by(ancestor):
                break
            no_grad = (
                isinstance(ancestor, cst.With)
                and self.loops.no_grad_block(ancestor.body) is ancestor
            )
            loop = isinstance(ancestor, (cst.For, cst.While)) and self.loops.is_validation_loop(
                ancestor
            )
            if no_grad or loop:
                best = ancestor
        return best

    def _all_callers_pass_copies(self, fn: cst.FunctionDef, param: str) -> bool:
        callers = self.loops.callers(fn)
        if not callers:
            return False
        for call in callers:
            passed = None
            for position, arg in enumerate(call.args):
                if not arg.star and self.modes.param_name(fn, arg, position) == param:
                    passed = arg
            if passed is None or self._object(passed.value) is None:
                return False
        return True


def _api_methods(spec: ApiSpec) -> tuple[str, ...]:
    """The methods an averaging API defines for its own state (not a model's sampling)."""
    return (*spec.update_methods, *spec.apply_methods, *spec.store_methods)


def _bound_by(statement: cst.CSTNode) -> set[str]:
    """The names a ``for`` target or a ``with ... as`` binds."""
    targets: list[cst.BaseExpression] = []
    if isinstance(statement, cst.For):
        targets.append(statement.target)
    elif isinstance(statement, cst.With):
        targets.extend(i.asname.name for i in statement.items if i.asname is not None)
    names: set[str] = set()
    while targets:
        target = targets.pop()
        if isinstance(target, cst.Name):
            names.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            targets.extend(e.value for e in target.elements)
    return names
