"""The training loop: which loop trains, which guard holds ``optimizer.step()``, where
validation happens, across the functions and methods of one module.

Loop bugs (an EMA updated on every micro-batch, before the step, validated in train mode)
are about where a statement sits relative to the backward pass, the optimizer step and its
accumulation guard. Real code splits the step across functions (``train_one_epoch`` calls
``self.optimizer_step()``), so every question here is answered through a small call graph of
the module's own functions: a call of a local function that steps *is* a step at that call.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.optimizers import Optimizers
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.syntax.vocabulary import OPTIMIZER_NAME, optimizer_name

Loop = cst.For | cst.While
FunctionNode = cst.FunctionDef | cst.Lambda

_SCALER_NAME = re.compile(r"scaler", re.IGNORECASE)
# Identifiers that make a condition an accumulation / sync guard.
_ACCUMULATION_WORDS = re.compile(
    r"(accum|sync_gradients|update_freq|grad_acc|gradient_acc|iters_to_accumulate|"
    r"optimizer_step|should_step|do_step|took_step|step_now|is_update_step|need_update|"
    r"update_grad|should_update|gradient_accumulation_boundary|has_updated|mini_step)",
    re.IGNORECASE,
)
# Keywords of a step helper that say whether this call steps (timm's NativeScaler
# ``loss_scaler(loss, optimizer, update_grad=...)``, ``need_update=``).
_GATE_KEYWORDS = ("update_grad", "need_update")
# Context managers under which the micro-batch does not step (its gradients only accumulate).
_ACCUMULATING_CONTEXTS = ("accumulate", "no_sync", "no_backward_sync")
_ENGINE_NAME = re.compile(r"engine", re.IGNORECASE)
_VALIDATION_FUNCTION = re.compile(
    r"(^|_)(val|valid|validate|validation|validate_\w+|eval|evaluate|evaluation|evaluator|"
    r"test|testing|inference|predict)(_|$)|validat|evaluat",
    re.IGNORECASE,
)
_VALIDATION_LOADER = re.compile(r"(^|_)(val|valid|validation|eval|test|dev)(_|$|\d)", re.IGNORECASE)
_NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled"}
_LOOP_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "islice", "progress_bar", "track"}


def _last_identifier(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Subscript):
        return _last_identifier(node.value)
    return None


def _identifiers(node: cst.CSTNode, index) -> Iterator[str]:
    if isinstance(node, cst.Name):
        yield node.value
    for name in index.descendants(node, (cst.Name,)):
        yield name.value


def _project_helpers(ctx: FileContext) -> tuple[set[int], set[int], dict[int, cst.Arg]]:
    """Calls of the project's step helpers (``loss_scaler(loss, optimizer)`` with the class
    defined in another module): those that step the optimizer, those that run backward,
    and, per call, the argument its step depends on (the helper's summary names the
    parameter: ``update_grad=(i + 1) % accum == 0``) when the call passes one that is not
    literally ``True``."""
    project = ctx.project
    steps: set[int] = set()
    backwards: set[int] = set()
    gates: dict[int, cst.Arg] = {}
    if project is None:
        return steps, backwards, gates
    for call in ctx.nodes(cst.Call):
        if not isinstance(call.func, (cst.Name, cst.Attribute)) or not call.args:
            continue
        helper = project.stepper(call)
        if helper is None:
            continue
        if helper.step:
            steps.add(id(call))
            gate = _condition_argument(call, helper.params, helper.condition)
            if gate is not None:
                gates[id(call)] = gate
        if helper.backward:
            backwards.add(id(call))
    return steps, backwards, gates


def _condition_argument(call: cst.Call, params: list[str], condition: str | None) -> cst.Arg | None:
    """The argument of ``call`` bound to the helper's parameter ``condition`` (by keyword
    or position), unless it is the constant ``True`` (a step on every call)."""
    if condition is None:
        return None
    found: cst.Arg | None = None
    position = 0
    for arg in call.args:
        if arg.star:
            return None  # ``*args``/``**kwargs``: which one it is is unknown
        if arg.keyword is not None:
            if arg.keyword.value == condition:
                found = arg
                break
            continue
        if position < len(params) and params[position] == condition:
            found = arg
            break
        position += 1
    if found is None or (isinstance(found.value, cst.Name) and found.value.value == "True"):
        return None
    return found


@dataclass(frozen=True, eq=False)
class StepSummary:
    """What a call does to the optimizer, as far as accumulation is concerned.

    ``steps``: the call runs ``optimizer.step()`` (itself or through what it calls);
    ``backpropagates``: it runs the backward pass; ``gate``: why the step it runs happens
    only on some calls, or None when it steps on every call. ``gate`` is a pair (kind,
    node): "guard" (an accumulation ``if`` or early exit around the step, ``node`` the
    ``If``), "accumulate" (under ``accelerator.accumulate()``, the ``With``), "keyword"
    (``update_grad=...``, the ``Arg``), "engine" (DeepSpeed's ``engine.step()``), "wrapper"
    (mmengine's ``update_params``), "multisteps" (``optax.apply_updates`` of an
    ``optax.MultiSteps`` optimizer), "helper" (a function whose own step is gated; ``node``
    is that function's gate).
    """

    steps: bool
    backpropagates: bool = False
    gate: tuple[str, cst.CSTNode] | None = None


@dataclass(frozen=True, eq=False)
class Anchor:
    """Where a node is reached inside a training loop: itself, or a call leading to it
    (``loop`` None: a step function run without a loop in the module)."""

    loop: Loop | None
    node: cst.CSTNode  # a node inside ``loop``'s own function (the node or a call leading to it)
    chain: tuple[cst.Call, ...] = ()  # calls from the loop's function down to the node


class TrainingLoops:
    """The module's training loops and the facts about them."""

    MAX_CALL_DEPTH = 4

    def __init__(
        self,
        ctx: FileContext,
        summaries: Callable[[cst.Call], StepSummary | None] | None = None,
    ) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.summaries = summaries
        self._optimizers: Optimizers | None = None
        self._resolver: ValueResolver | None = None
        self._deepspeed: bool | None = None
        self._settings: dict[str, bool] = {}
        self._backward_loops: dict[int, bool] = {}
        self.functions: list[cst.FunctionDef] = list(ctx.nodes(cst.FunctionDef))
        self._by_name: dict[str, list[cst.FunctionDef]] = {}
        self._classes: dict[int, cst.ClassDef | None] = {}  # function id -> its class
        for fn in self.functions:
            self._by_name.setdefault(fn.name.value, []).append(fn)
        # Targets by what decides them (the name, and the class for methods): the calls of
        # one name share one list, and a module with many same-named functions (copies of
        # a script) is not rescanned per call.
        self._resolved: dict[tuple[str, int | None, bool], list[cst.FunctionDef]] = {}
        self._methods = {
            name
            for name, fns in self._by_name.items()
            if fns and any(self.class_of(f) is not None for f in fns)
        }
        self._callers: dict[int, list[cst.Call]] = {}
        self._local_calls: dict[int, list[cst.FunctionDef]] = {}
        self._calls_in: dict[int | None, list[cst.Call]] = {}
        # Answers per loop or function, asked once per update: memoised to stay linear.
        self._step_anchors: dict[int, list[cst.Call]] = {}
        self._stepping_in: dict[int | None, list[cst.Call]] = {}
        self._micro_batch: dict[int, bool] = {}
        self._loop_functions: set[int] | None = None
        self._assignments: dict[str, list[cst.BaseExpression]] | None = None
        self._step_models: dict[str, set[str] | None] = {}
        self._block_ifs: dict[int, tuple[list[int], list[cst.If]]] = {}
        self._direct_ids: dict[int, set[int]] = {}
        self._owners: dict[int, cst.FunctionDef | None] = {}  # call id -> its function
        for call in ctx.nodes(cst.Call):
            owner = self._owners[id(call)] = self.function_of(call)
            self._calls_in.setdefault(id(owner) if owner is not None else None, []).append(call)
            targets = self._resolve_local_call(call)
            if targets:
                self._local_calls[id(call)] = targets
                for target in targets:
                    self._callers.setdefault(id(target), []).append(call)
        self.backward_calls = [c for c in ctx.nodes(cst.Call) if self.is_backward_call(c)]
        self.step_calls = [c for c in ctx.nodes(cst.Call) if self.is_step_call(c)]
        self._helper_steps, self._helper_backwards, self._helper_gates = _project_helpers(ctx)
        self.step_calls.extend(c for c in ctx.nodes(cst.Call) if id(c) in self._helper_steps)
        self.backward_calls.extend(
            c for c in ctx.nodes(cst.Call) if id(c) in self._helper_backwards
        )
        self._stepping = self._closure(self.step_calls)
        self._backwarding = self._closure(self.backward_calls)
        self.train_loops: list[Loop] = [
            loop
            for loop in (*ctx.nodes(cst.For), *ctx.nodes(cst.While))
            if self._loop_does(loop, self._stepping, self.step_calls)
            and self._loop_does(loop, self._backwarding, self.backward_calls)
        ]
        self.train_loops.sort(key=lambda loop: self.index.order[id(loop)])
        self._train_loop_ids = {id(loop) for loop in self.train_loops}
        # Innermost ones: the loops over batches (an epoch loop around them trains too). In
        # document order, a loop holds another training loop exactly when it holds the next.
        loops = self.train_loops
        self.step_loops: list[Loop] = [
            loop
            for n, loop in enumerate(loops)
            if n + 1 == len(loops) or not self.index.contains(loop, loops[n + 1])
        ]

    @classmethod
    def build(cls, ctx: FileContext) -> TrainingLoops:
        # A project-wide model may attach summaries of other files' functions to the context.
        return cls(ctx, getattr(ctx, "step_summaries", None))

    # Call graph ------------------------------------------------------------------------------
    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        found = self.index.enclosing(node, cst.FunctionDef)
        return found if isinstance(found, cst.FunctionDef) else None

    def class_of(self, fn: cst.FunctionDef) -> cst.ClassDef | None:
        key = id(fn)
        if key in self._classes:
            return self._classes[key]
        parent = self.index.enclosing(fn, cst.ClassDef, cst.FunctionDef)
        found = self._classes[key] = parent if isinstance(parent, cst.ClassDef) else None
        return found

    def _named(self, name: str, cls: cst.ClassDef | None, methods: bool) -> list[cst.FunctionDef]:
        """The functions ``name`` outside classes (``methods`` False), the methods ``name``
        (``cls`` None) or those of ``cls``; one shared list per question."""
        key = (name, id(cls) if cls is not None else None, methods)
        found = self._resolved.get(key)
        if found is None:
            fns = self._by_name.get(name, [])
            if not methods:
                found = [f for f in fns if self.class_of(f) is None]
            elif cls is None:
                found = [f for f in fns if self.class_of(f)]
            else:
                found = [f for f in fns if self.class_of(f) is cls]
            self._resolved[key] = found
        return found

    def _resolve_local_call(self, call: cst.Call) -> list[cst.FunctionDef]:
        func = call.func
        if isinstance(func, cst.Name):
            return self._named(func.value, None, False)
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in ("self", "cls", "super")
        ):
            caller_fn = self.function_of(call)
            caller_class = self.class_of(caller_fn) if caller_fn is not None else None
            if caller_class is not None:
                same_class = self._named(func.attr.value, caller_class, True)
                if same_class:
                    return same_class
            return self._named(func.attr.value, None, True)
        if isinstance(func, cst.Attribute) and func.attr.value in self._methods:
            # ``trainer.step()`` after ``trainer = Trainer(...)``, ``self.helper.update()``.
            if self._resolver is None:
                self._resolver = self.ctx.get(ValueResolver)
            cls = self._resolver.instance_class(func.value)
            if cls is not None:
                return self._named(func.attr.value, cls, True)
        return []

    def local_targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The module's own functions a call may run (``f()``, ``self.m()``)."""
        return self._local_calls.get(id(call), [])

    def callers(self, fn: cst.FunctionDef) -> list[cst.Call]:
        return self._callers.get(id(fn), [])

    def calls_in(self, fn: cst.FunctionDef | None) -> list[cst.Call]:
        """Calls whose innermost enclosing function is ``fn`` (None: module level)."""
        return self._calls_in.get(id(fn) if fn is not None else None, [])

    def _closure(self, seeds: Iterable[cst.Call]) -> set[int]:
        """Functions that (transitively) contain one of ``seeds``."""
        doing: set[int] = set()
        owners = self._owners
        frontier = [owners[id(c)] if id(c) in owners else self.function_of(c) for c in seeds]
        while frontier:
            fn = frontier.pop()
            if fn is None or id(fn) in doing:
                continue
            doing.add(id(fn))
            for call in self.callers(fn):
                frontier.append(owners[id(call)])
        return doing

    def _calls_doing(self, call: cst.Call, doing: set[int]) -> bool:
        targets = self._local_calls.get(id(call))
        return targets is not None and not doing.isdisjoint(map(id, targets))

    def _loop_does(self, loop: Loop, doing: set[int], direct: list[cst.Call]) -> bool:
        fn = self.function_of(loop)
        direct_ids = self._direct_ids.get(id(direct))
        if direct_ids is None:
            direct_ids = self._direct_ids[id(direct)] = {id(d) for d in direct}
        for call in self.calls_in(fn):
            if not self.index.contains(loop, call):
                continue
            if id(call) in direct_ids or self._calls_doing(call, doing):
                return True
        return False

    # What a call is -------------------------------------------------------------------------
    def is_backward_call(self, call: cst.Call) -> bool:
        """``loss.backward()``, ``accelerator.backward(loss)``, ``self.manual_backward(loss)``,
        timm's ``loss_scaler(loss, optimizer)`` and mmengine's
        ``optim_wrapper.update_params(loss)`` (backward and step in one call)."""
        func = call.func
        if self.is_scaler_call(call) or self.is_lightning_step(call):
            return True
        external = self.external_summary(call)
        if external is not None and external.backpropagates:
            return True
        if isinstance(func, cst.Name) and func.value == "value_and_grad":
            return True
        if not isinstance(func, cst.Attribute):
            return False
        name = func.attr.value
        if name == "backward":
            return True
        if name in ("grad", "value_and_grad") and dotted_name(func.value) == "jax":
            return True  # JAX: the gradient transformation is the backward pass
        if name == "update_params":  # mmengine's OptimWrapper: backward, then step
            receiver = _last_identifier(func.value)
            return bool(receiver and "optim" in receiver.lower())
        return name == "manual_backward"

    def is_scaler_call(self, call: cst.Call) -> bool:
        """timm's NativeScaler/ApexScaler ``__call__``: ``loss_scaler(loss, optimizer, ...)``
        runs the backward pass and the optimizer step, with no ``step`` at the call."""
        name = _last_identifier(call.func)
        if name is None or not _SCALER_NAME.search(name) or len(call.args) < 2:
            return False
        if any(
            arg.keyword is not None and arg.keyword.value in _GATE_KEYWORDS for arg in call.args
        ):
            return True
        second = call.args[1]
        if second.keyword is not None and second.keyword.value != "optimizer":
            return False
        receiver = _last_identifier(second.value)
        return bool(receiver and OPTIMIZER_NAME.search(receiver))

    def is_lightning_step(self, call: cst.Call) -> bool:
        """``super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)`` in a
        Lightning ``optimizer_step`` override: the base method runs the closure (the
        training step and its backward pass), then the optimizer step."""
        func = call.func
        if not (
            isinstance(func, cst.Attribute)
            and func.attr.value == "optimizer_step"
            and isinstance(func.value, cst.Call)
            and isinstance(func.value.func, cst.Name)
            and func.value.func.value == "super"
        ):
            return False
        fn = self.function_of(call)
        return fn is not None and fn.name.value == "optimizer_step"

    def external_summary(self, call: cst.Call) -> StepSummary | None:
        """What a call into another file does, when something outside this module knows.

        The one place the loop model asks about a callee it cannot read: the module's own
        functions are answered from their bodies; a project-wide model can answer for
        functions of other files by setting ``summaries`` (a callable from a call to its
        ``StepSummary``, or None when it does not know)."""
        if self.summaries is None:
            return None
        return self.summaries(call)

    def is_step_call(self, call: cst.Call) -> bool:
        """An optimizer step: ``optimizer.step()``, ``scaler.step(optimizer)``,
        ``optim_wrapper.update_params(loss)``; ``sgd.step()`` when ``sgd`` is known to be an
        optimizer by where it was made (``analysis/objects/optimizers.py``)."""
        func = call.func
        if self.is_scaler_call(call) or self.is_lightning_step(call):
            return True
        external = self.external_summary(call)
        if external is not None and external.steps:
            return True
        if not isinstance(func, cst.Attribute):
            return False
        method = func.attr.value
        receiver = _last_identifier(func.value)
        if receiver is None:
            return False
        if method == "update_params":
            return "optim" in receiver.lower()
        if method == "apply_updates":  # optax: the update is applied to the parameters here
            return receiver == "optax"
        if method == "apply_gradients":  # flax's TrainState
            return True
        if method != "step":
            return False
        if self.is_engine(func.value):
            return True
        if _SCALER_NAME.search(receiver) and call.args:
            return True
        if optimizer_name(receiver):
            return True
        if self._optimizers is None:
            self._optimizers = self.ctx.get(Optimizers)
        return self._optimizers.is_optimizer(func.value)

    def is_engine(self, expr: cst.BaseExpression) -> bool:
        """A DeepSpeed engine (``model_engine`` in a module that uses DeepSpeed): its
        ``step()`` steps the optimizer only at gradient-accumulation boundaries."""
        name = _last_identifier(expr)
        if name is None or not _ENGINE_NAME.search(name):
            return False
        if self._deepspeed is None:
            imports = self.ctx.get(ImportTable)
            self._deepspeed = any(
                q == "deepspeed" or q.startswith("deepspeed.")
                for targets in imports.aliases.values()
                for q in targets
            )
        return self._deepspeed

    def steps(self, call: cst.Call) -> bool:
        """The call performs an optimizer step, itself or through a local function."""
        return (
            self.is_step_call(call)
            or id(call) in self._helper_steps
            or self._calls_doing(call, self._stepping)
        )

    def backpropagates(self, call: cst.Call) -> bool:
        return (
            self.is_backward_call(call)
            or id(call) in self._helper_backwards
            or self._calls_doing(call, self._backwarding)
        )

    # Which model a step trains -------------------------------------------------------------
    def _assigned(self, name: str) -> list[cst.BaseExpression]:
        """Values assigned anywhere in the module to ``name`` (``name = ...``,
        ``self.name = ...``): a module-wide, name-based view, as a GAN script's ``g_optim``
        made in ``main()`` and stepped in ``train()``."""
        if self._assignments is None:
            self._assignments = {}
            for assign in self.ctx.nodes(cst.Assign):
                for target in assign.targets:
                    key = _last_identifier(target.target)
                    if key is not None:
                        self._assignments.setdefault(key, []).append(assign.value)
        return self._assignments.get(name, [])

    def _with_aliases(self, names: set[str]) -> set[str]:
        """``names`` and the models they were assigned from (``g_module = generator.module``,
        ``model = DDP(model)``, ``net = model.to(device)`` add ``generator``, ``model``), up
        to three assignments back."""
        found = set(names)
        frontier = set(names)
        for _ in range(3):
            new: set[str] = set()
            for name in frontier:
                for value in self._assigned(name):
                    new |= _model_roots(value)
            frontier = new - found
            if not frontier:
                break
            found |= frontier
        return found

    def step_models(self, step: cst.Call) -> set[str] | None:
        """The models whose parameters the optimizer that ``step`` steps was given
        (``{"generator"}`` for ``g_optim.step()`` after ``g_optim = Adam(generator.parameters())``),
        with their aliases; None when the module does not say."""
        func = step.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "step":
            return None
        receiver: cst.BaseExpression = func.value
        name = _last_identifier(receiver)
        if name is not None and _SCALER_NAME.search(name) and step.args:
            receiver = step.args[0].value
            name = _last_identifier(receiver)
        if name is None:
            return None
        if name in self._step_models:
            return self._step_models[name]
        found: set[str] | None = None
        values = self._assigned(name)
        for value in values:
            models = self._parameter_owners(value) if isinstance(value, cst.Call) else set()
            if not models:
                found = None
                break
            found = (found or set()) | models
        self._step_models[name] = self._with_aliases(found) if found else None
        return self._step_models[name]

    def _parameter_owners(self, call: cst.Call, depth: int = 0) -> set[str]:
        """Receivers of ``.parameters()`` in the first argument of an optimizer call (or
        of the value a name there was assigned)."""
        first = next(
            (
                a
                for a in call.args
                if a.keyword is None or a.keyword.value in ("params", "parameters", "param_groups")
            ),
            None,
        )
        if first is None:
            return set()
        return self._owners_in(first.value, depth)

    def _owners_in(self, expr: cst.BaseExpression, depth: int) -> set[str]:
        owners: set[str] = set()
        nodes = [expr, *self.index.descendants(expr, (cst.Call,))]
        for node in nodes:
            if (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value in ("parameters", "named_parameters")
            ):
                owner = _last_identifier(node.func.value)
                if owner is not None:
                    owners.add(owner)
        if not owners and isinstance(expr, cst.Name) and depth < 2:
            for value in self._assigned(expr.value):
                owners |= self._owners_in(value, depth + 1)
        return owners

    def trains(self, step: cst.Call, node: cst.CSTNode) -> bool | None:
        """Whether ``step``'s optimizer trains a model ``node`` (an update) names: True or
        False when the module says which models the optimizer was given, else None."""
        models = self.step_models(step)
        if models is None:
            return None
        names = self._mentioned_models(node)
        # A hand-written update names loop variables: the loop over parameter pairs says
        # which models they come from (``zip(g_ema.parameters(), generator.parameters())``).
        fn = self.function_of(node)
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                break
            if isinstance(ancestor, cst.For) and _target_names(ancestor.target) & names:
                names |= self._mentioned_models(ancestor.iter)
        return bool(models & self._with_aliases(names))

    def _mentioned_models(self, node: cst.CSTNode) -> set[str]:
        names: set[str] = set()
        for sub in (node, *self.index.descendants(node, (cst.Name, cst.Attribute))):
            if isinstance(sub, (cst.Name, cst.Attribute)):
                names |= _model_roots(sub)
        return names

    # Where a node runs ----------------------------------------------------------------------
    def anchors(self, node: cst.CSTNode) -> list[Anchor]:
        """The training loops ``node`` runs in: directly, or through calls of its function."""
        found: list[Anchor] = []
        self._anchors(node, node, (), 0, found, set())
        return found

    def _anchors(
        self,
        node: cst.CSTNode,
        anchor: cst.CSTNode,
        chain: tuple[cst.Call, ...],
        depth: int,
        found: list[Anchor],
        seen: set[int],
    ) -> None:
        loop = self._innermost_train_loop(anchor)
        if loop is not None:
            found.append(Anchor(loop, anchor, chain))
            return
        fn = self.function_of(anchor)
        if fn is None or depth >= self.MAX_CALL_DEPTH or id(fn) in seen:
            return
        seen.add(id(fn))
        for call in self.callers(fn):
            self._anchors(node, call, (call, *chain), depth + 1, found, seen)

    def _innermost_train_loop(self, node: cst.CSTNode) -> Loop | None:
        fn = self.function_of(node)
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                return None
            if isinstance(ancestor, (cst.For, cst.While)) and id(ancestor) in self._train_loop_ids:
                return ancestor
        return None

    def step_anchors(self, loop: Loop) -> list[cst.Call]:
        """Calls inside ``loop`` (in its own function) that step the optimizer."""
        found = self._step_anchors.get(id(loop))
        if found is None:
            fn = self.function_of(loop)
            found = self._step_anchors[id(loop)] = [
                call for call in self.stepping_calls_in(fn) if self.index.contains(loop, call)
            ]
        return found

    def runs_training_loop(self, call: cst.Call, depth: int = 0) -> bool:
        """The call runs a whole training loop (``fit(...)``, ``train_one_epoch(...)``): the
        functions it may run hold one, themselves or through their own calls. Such a call
        steps many times; it is not the step of one iteration."""
        if self._loop_functions is None:
            self._loop_functions = {
                id(fn) for fn in map(self.function_of, self.train_loops) if fn is not None
            }
        for target in self.local_targets(call):
            if id(target) in self._loop_functions:
                return True
            if depth < self.MAX_CALL_DEPTH and any(
                self.runs_training_loop(inner, depth + 1)
                for inner in self.stepping_calls_in(target)
                if inner is not call
            ):
                return True
        return False

    def stepping_calls_in(self, fn: cst.FunctionDef | None) -> list[cst.Call]:
        """The calls of ``calls_in(fn)`` that step the optimizer, in document order."""
        key = id(fn) if fn is not None else None
        found = self._stepping_in.get(key)
        if found is None:
            found = self._stepping_in[key] = [c for c in self.calls_in(fn) if self.steps(c)]
        return found

    def guards(self, node: cst.CSTNode, loop: Loop) -> list[cst.If]:
        """Accumulation/sync conditions between ``loop`` and ``node``, innermost first."""
        found: list[cst.If] = []
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If) and self.is_accumulation_guard(ancestor):
                found.append(ancestor)
        return found

    def is_accumulation_guard(self, node: cst.If) -> bool:
        """A condition that holds only on some iterations: ``(i + 1) % accum == 0``,
        ``accelerator.sync_gradients``, ``took_step``, ``ni - last_opt_step >= accumulate``."""
        test = node.test
        if any(
            isinstance(op, cst.BinaryOperation) and isinstance(op.operator, cst.Modulo)
            for op in self.index.descendants(test, (cst.BinaryOperation,))
        ):
            return True
        if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
            return True
        return any(_ACCUMULATION_WORDS.search(name) for name in _identifiers(test, self.index))

    def accumulate_context(
        self, node: cst.CSTNode, loop: cst.CSTNode | None = None
    ) -> cst.With | None:
        """The ``with accelerator.accumulate(model):`` block holding ``node``, if any (also
        ``model.no_sync()`` and Fabric's ``no_backward_sync``)."""
        for ancestor in self.index.ancestors(node):
            if ancestor is loop or isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return None
            if isinstance(ancestor, cst.With) and self.accumulating_block(ancestor):
                return ancestor
        return None

    def accumulating_block(self, block: cst.With) -> bool:
        """``with accelerator.accumulate(model):``, ``with model.no_sync():``,
        ``with fabric.no_backward_sync(model, enabled=...):``."""
        for item in block.items:
            call = item.item
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in _ACCUMULATING_CONTEXTS
            ):
                return True
        return False

    def micro_batch_loops(self, node: cst.CSTNode, loop: Loop) -> list[Loop]:
        """Loops between ``loop`` and ``node`` that backpropagate without stepping."""
        fn = self.function_of(loop)
        found: list[Loop] = []
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                break
            if isinstance(ancestor, (cst.For, cst.While)) and self._is_micro_batch(ancestor, fn):
                found.append(ancestor)
        return found

    # Guards, early exits, branches ------------------------------------------------------------
    def guard_of(self, node: cst.CSTNode, scope: cst.CSTNode | None) -> cst.If | None:
        """The accumulation condition that ``node`` runs under, between ``scope`` (a loop or
        a function; None: the module) and ``node``: an enclosing ``if`` (innermost first), or
        an early exit before it in the same iteration or call (``if not need_update:
        continue``, ``if (i + 1) % k != 0: continue``, ``if not should_step: return``)."""
        own = self.guards(node, scope) if isinstance(scope, (cst.For, cst.While)) else None
        if own is None:
            own = []
            for ancestor in self.index.ancestors(node):
                if ancestor is scope or isinstance(ancestor, (cst.FunctionDef, cst.Module)):
                    break
                if isinstance(ancestor, cst.If) and self.is_accumulation_guard(ancestor):
                    own.append(ancestor)
        # ``if (i + 1) % k != 0: ...; continue`` holding ``node``: the branch of the
        # micro-batches that do not step, the complement of a guard.
        own = [
            guard
            for guard in own
            if not self._per_item(guard, scope)
            and not (self._exits(guard, node) and self.index.contains(guard.body, node))
        ]
        if own:
            return own[0]
        return self.early_exit(node, scope)

    def _per_item(self, guard: cst.If, scope: cst.CSTNode | None) -> bool:
        """``guard`` sits in a small loop inside the iteration and tests that loop's item
        (``for phase in phases: if batch_idx % phase.interval != 0: continue``): a
        condition per item (StyleGAN's lazy regularisation), not an accumulation of the
        whole iteration."""
        fn = self.function_of(guard)
        names = set(_identifiers(guard.test, self.index))
        for ancestor in self.index.ancestors(guard):
            if ancestor is scope or isinstance(ancestor, (cst.FunctionDef, cst.Module)):
                return False
            if (
                isinstance(ancestor, cst.For)
                and not self._backpropagates_in(ancestor, fn)
                and _target_names(ancestor.target) & names
            ):
                return True
        return False

    def early_exit(
        self,
        node: cst.CSTNode,
        scope: cst.CSTNode | None,
        guard: Callable[[cst.If], bool] | None = None,
    ) -> cst.If | None:
        """An ``if <accumulation test>: continue`` (or ``break``/``return``) that comes
        before ``node`` in a block around it, within ``scope``; ``guard`` tells another
        kind of test (a framework's step counter) from the rest."""
        child: cst.CSTNode = node
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, (cst.IndentedBlock, cst.Module)):
                for statement in self._ifs_before(ancestor, child):
                    if statement is child or self.index.contains(statement, node):
                        break
                    if (
                        isinstance(statement, cst.If)
                        and self._exits(statement, node, guard)
                        and not self._per_item(statement, scope)
                    ):
                        return statement
            if ancestor is scope or isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                break
            child = ancestor
        return None

    def _ifs_before(
        self, block: cst.IndentedBlock | cst.Module, child: cst.CSTNode
    ) -> Sequence[cst.BaseStatement]:
        """The ``if`` statements of ``block`` before its statement ``child``, in order (the
        other statements cannot exit early): a lookup, not a scan of a long block."""
        at = self.index.order_of(child)
        if at is None or self.index.parent(child) is not block:
            return block.body
        found = self._block_ifs.get(id(block))
        if found is None:
            ifs = [s for s in block.body if isinstance(s, cst.If)]
            found = self._block_ifs[id(block)] = ([self.index.order[id(s)] for s in ifs], ifs)
        orders, ifs = found
        return ifs[: bisect.bisect_left(orders, at)]

    def _exits(
        self, statement: cst.If, node: cst.CSTNode, guard: Callable[[cst.If], bool] | None = None
    ) -> bool:
        if statement.orelse is not None or not (guard or self.is_accumulation_guard)(statement):
            return False
        body = statement.body
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            return False
        last = body.body[-1]
        if not isinstance(last, cst.SimpleStatementLine) or not last.body:
            return False
        small = last.body[-1]
        if isinstance(small, cst.Return):
            return True
        if isinstance(small, (cst.Continue, cst.Break)):
            loop = self.index.enclosing(statement, cst.For, cst.While, cst.FunctionDef)
            return isinstance(loop, (cst.For, cst.While)) and self.index.contains(loop, node)
        return False

    def exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """``a`` and ``b`` sit in different branches of one ``if``/``else``: they never run
        in the same pass."""
        for ancestor in self.index.ancestors(a):
            if isinstance(ancestor, cst.If) and ancestor.orelse is not None:
                in_body = self.index.contains(ancestor.body, a)
                other = ancestor.orelse if in_body else ancestor.body
                if in_body != self.index.contains(ancestor.body, b) and self.index.contains(
                    other, b
                ):
                    return True
        return False

    def iteration_loop(self, node: cst.CSTNode, fn: cst.FunctionDef | None) -> Loop | None:
        """The innermost loop around ``node`` in ``fn`` whose iterations are training
        iterations or micro-batches (it runs a backward pass); small loops over parameter
        pairs, EMA rates or optimizers do not count."""
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                return None
            if isinstance(ancestor, (cst.For, cst.While)) and self._backpropagates_in(ancestor, fn):
                return ancestor
        return None

    def _backpropagates_in(self, loop: Loop, fn: cst.FunctionDef | None) -> bool:
        known = self._backward_loops.get(id(loop))
        if known is None:
            known = any(
                self.index.contains(loop, call) and self.backpropagates(call)
                for call in self.calls_in(fn)
            )
            self._backward_loops[id(loop)] = known
        return known

    # Accumulation-gated steps -----------------------------------------------------------------
    def summary(self, call: cst.Call, depth: int = 0) -> StepSummary:
        """What ``call`` does to the optimizer: whether it steps, backpropagates, and whether
        its step runs only on some calls (see ``StepSummary``)."""
        external = self.external_summary(call)
        if external is not None:
            return external
        steps = self.steps(call)
        backward = self.backpropagates(call)
        return StepSummary(steps, backward, self._own_gate(call, depth) if steps else None)

    def _own_gate(self, call: cst.Call, depth: int) -> tuple[str, cst.CSTNode] | None:
        """Why the step a call runs happens only on some calls (the call site aside)."""
        for arg in call.args:
            if (
                arg.keyword is not None
                and arg.keyword.value in _GATE_KEYWORDS
                and not (isinstance(arg.value, cst.Name) and arg.value.value == "True")
            ):
                return "keyword", arg
        helper_gate = self._helper_gates.get(id(call))
        if helper_gate is not None:
            return "keyword", helper_gate
        func = call.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "step" and self.is_engine(func.value):
                if self._setting_present("gradient_accumulation_steps"):
                    return "engine", call
            elif method == "update_params" and self._setting_present("accumulative_counts"):
                return "wrapper", call
            elif method in ("apply_updates", "apply_gradients") and self._multi_steps():
                return "multisteps", call
        if depth >= self.MAX_CALL_DEPTH:
            return None
        for target in self.local_targets(call):
            inner = [c for c in self.calls_in(target) if self.steps(c)]
            if not inner:
                continue
            if any(self.iteration_loop(c, target) is not None for c in inner):
                return None  # it runs a loop of steps (an epoch), not one step
            gates = [self.step_gate(c, target, depth + 1) for c in inner]
            if all(g is not None for g in gates):
                gate = gates[0]
                assert gate is not None
                return "helper", gate[1]
        return None

    def _multi_steps(self) -> bool:
        """The module accumulates with ``optax.MultiSteps``: the update it applies is zero on
        all but every k-th call."""
        if "MultiSteps" not in self._settings:
            self._settings["MultiSteps"] = any(
                _last_identifier(call.func) == "MultiSteps" for call in self.ctx.nodes(cst.Call)
            )
        return self._settings["MultiSteps"]

    def _setting_present(self, keyword: str) -> bool:
        """The module configures ``keyword`` (a keyword argument or a dict key) with a value
        other than 1."""
        if keyword not in self._settings:
            self._settings[keyword] = self._find_setting(keyword)
        return self._settings[keyword]

    def _find_setting(self, keyword: str) -> bool:
        for call in self.ctx.nodes(cst.Call):
            for arg in call.args:
                if (
                    arg.keyword is not None
                    and arg.keyword.value == keyword
                    and not (isinstance(arg.value, cst.Integer) and arg.value.value == "1")
                ):
                    return True
        for mapping in self.ctx.nodes(cst.Dict):
            for element in mapping.elements:
                if (
                    isinstance(element, cst.DictElement)
                    and isinstance(element.key, cst.SimpleString)
                    and element.key.evaluated_value == keyword
                    and not (isinstance(element.value, cst.Integer) and element.value.value == "1")
                ):
                    return True
        return False

    def step_gate(
        self, step: cst.Call, scope: cst.CSTNode | None, depth: int = 0
    ) -> tuple[str, cst.CSTNode] | None:
        """Why ``step`` (a call that steps, in ``scope``) runs only on some micro-batches:
        an accumulation guard or early exit around it, an ``accelerator.accumulate()``
        block, or a gate of its own (``StepSummary.gate``); None when it steps every time.
        A guard whose other branch also steps does not gate (the helper runs either way)."""
        guard = self.guard_of(step, scope)
        if guard is not None and not self._steps_in_both(guard, step):
            return "guard", guard
        block = self.accumulate_context(step, scope)
        if block is not None:
            return "accumulate", block
        return self.summary(step, depth).gate

    def _steps_in_both(self, guard: cst.If, step: cst.Call) -> bool:
        if guard.orelse is None or not self.index.contains(guard, step):
            return False
        other = guard.orelse if self.index.contains(guard.body, step) else guard.body
        fn = self.function_of(step)
        return any(
            self.index.contains(other, call) and self.steps(call) for call in self.calls_in(fn)
        )

    def level_steps(self, here: cst.CSTNode, scope: cst.CSTNode | None) -> list[cst.Call]:
        """The calls that step the optimizer in the same pass as ``here``: in ``scope`` (the
        training loop, or ``here``'s function), in the same training iteration, not in the
        other branch of an ``if``, and not ``here`` itself or a call around it."""
        fn = self.function_of(here)
        own = self.iteration_loop(here, fn)
        found: list[cst.Call] = []
        for call in self.stepping_calls_in(fn):
            if call is here or self.index.contains(call, here) or self.index.contains(here, call):
                continue
            if isinstance(scope, (cst.For, cst.While)) and not self.index.contains(scope, call):
                continue
            if self.iteration_loop(call, fn) is not own:
                continue
            if self.exclusive(call, here):
                continue
            found.append(call)
        return found

    def call_chain(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """``node`` and, while its function has one caller in the module, that call."""
        chain = [node]
        seen: set[int] = set()
        fn = self.function_of(node)
        while fn is not None and id(fn) not in seen and len(chain) <= self.MAX_CALL_DEPTH:
            seen.add(id(fn))
            callers = self.callers(fn)
            if len(callers) != 1:
                break
            chain.append(callers[0])
            fn = self.function_of(callers[0])
        return chain

    def _is_micro_batch(self, loop: Loop, fn: cst.FunctionDef | None) -> bool:
        """``loop`` (in ``fn``) backpropagates without stepping."""
        flag = self._micro_batch.get(id(loop))
        if flag is None:
            inner = [c for c in self.calls_in(fn) if self.index.contains(loop, c)]
            flag = self._micro_batch[id(loop)] = any(
                self.backpropagates(c) for c in inner
            ) and not any(self.steps(c) for c in inner)
        return flag

    def runs_per_micro_batch(self, node: cst.CSTNode) -> MicroBatchFinding | None:
        """Why ``node`` runs more often than the optimizer steps, or None if it does not.

        Asked level by level, from ``node``'s own function out to the training loop: at the
        first level that steps the optimizer in the same pass, ``node`` runs per
        micro-batch when every such step is gated (behind an accumulation guard or early
        exit that does not also hold ``node``, under ``accelerator.accumulate()``, or a
        step helper that gates itself: ``loss_scaler(..., update_grad=...)``, DeepSpeed's
        ``engine.step()``) and ``node`` is not. It also does when it sits in an inner loop
        that backpropagates without stepping, or under ``accelerator.accumulate()``
        outside ``if accelerator.sync_gradients:``.
        """
        return next(self.micro_batch_findings(node), None)

    def micro_batch_findings(self, node: cst.CSTNode) -> Iterator[MicroBatchFinding]:
        """One finding per training loop (or call chain) that runs ``node`` per micro-batch,
        as ``runs_per_micro_batch`` judges each: a helper called from two accumulation
        loops is wrong at each call site, and each is fixed where it is."""
        anchors = self.anchors(node)
        if not anchors and self.backward_calls and self.function_of(node) is not None:
            # No loop in the module: a step function a framework calls once per batch (a
            # Lightning training_step with manual optimisation), judged from its callers.
            chain = self.call_chain(node)
            anchors = [Anchor(None, chain[-1], tuple(reversed(chain[1:])))]  # type: ignore[arg-type]
        for anchor in anchors:
            finding = self._micro_batch_finding(node, anchor)
            if finding is not None:
                yield finding

    def _micro_batch_finding(self, node: cst.CSTNode, anchor: Anchor) -> MicroBatchFinding | None:
        loop = anchor.loop
        levels: list[cst.CSTNode] = [node, *reversed(anchor.chain)]
        for here in levels:
            at_loop = loop is not None and here is anchor.node
            scope: cst.CSTNode | None = loop if at_loop else self.function_of(here)
            if self.guard_of(here, scope) is not None:
                return None  # runs once per optimizer step
            if at_loop:
                inner = self.micro_batch_loops(here, loop)
                if inner:
                    return MicroBatchFinding(anchor, "loop", inner[0], None, here, loop)
            context = self.accumulate_context(here, scope)
            if context is not None:
                return MicroBatchFinding(anchor, "accumulate", context, None, here, scope)
            steps = self.level_steps(here, scope)
            if not steps:
                if here is not node and isinstance(here, cst.Call) and self.steps(here):
                    return None  # reached through the step's own helper, judged inside it
                continue
            gates = [self.step_gate(step, scope) for step in steps]
            if any(gate is None for gate in gates):
                return None  # a step on every pass: the node runs once per step
            kind, where = gates[0]  # type: ignore[misc]
            return MicroBatchFinding(anchor, kind, where, steps[0], here, scope)
        return None

    # Validation -----------------------------------------------------------------------------
    def is_validation_name(self, name: str) -> bool:
        """A function name that says it evaluates (``evaluate``, ``validate_ema``,
        ``run_eval``), not a test (``test_something``)."""
        return bool(_VALIDATION_FUNCTION.search(name)) and not name.startswith("test_")

    def is_validation_function(self, fn: cst.FunctionDef) -> bool:
        name = fn.name.value
        if _VALIDATION_FUNCTION.search(name) and not name.startswith("test_"):
            return True
        return self._decorated_no_grad(fn)

    def _decorated_no_grad(self, fn: cst.FunctionDef) -> bool:
        from ema_lint.analysis.syntax.names import ImportTable

        imports = self.ctx.get(ImportTable)
        for decorator in fn.decorators:
            target = decorator.decorator
            if isinstance(target, cst.Call):
                target = target.func
            if any(q in _NO_GRAD for q in imports.qualified_names(target)):
                return True
        return False

    def no_grad_block(self, node: cst.CSTNode) -> cst.With | cst.FunctionDef | None:
        """The ``with torch.no_grad():`` (or inference_mode) block or decorated function."""
        from ema_lint.analysis.syntax.names import ImportTable

        imports = self.ctx.get(ImportTable)
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    target = item.item.func if isinstance(item.item, cst.Call) else item.item
                    names = imports.qualified_names(target)
                    if any(q in _NO_GRAD for q in names):
                        if dotted_name(target) and dotted_name(target).endswith("set_grad_enabled"):
                            call = item.item
                            if not (
                                isinstance(call, cst.Call)
                                and call.args
                                and isinstance(call.args[0].value, cst.Name)
                                and call.args[0].value.value == "False"
                            ):
                                continue
                        return ancestor
            if isinstance(ancestor, cst.FunctionDef) and self._decorated_no_grad(ancestor):
                return ancestor
        return None

    def loop_iterable(self, loop: Loop) -> cst.BaseExpression | None:
        """What a ``for`` loop iterates, unwrapped from ``enumerate``/``tqdm``/``zip``..."""
        if not isinstance(loop, cst.For):
            return None
        node: cst.BaseExpression = loop.iter
        while isinstance(node, cst.Call) and node.args:
            name = _last_identifier(node.func)
            if name not in _LOOP_WRAPPERS:
                break
            node = node.args[0].value
        return node

    def is_validation_loop(self, loop: Loop) -> bool:
        iterable = self.loop_iterable(loop)
        if iterable is None:
            return False
        name = _last_identifier(iterable)
        return bool(name and _VALIDATION_LOADER.search(name))

    def is_validation_context(self, node: cst.CSTNode) -> bool:
        """Inside a validation function, a no-grad block, or a loop (or comprehension) over a
        validation loader."""
        if self.no_grad_block(node) is not None:
            return True
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef) and self.is_validation_function(ancestor):
                return True
            if isinstance(ancestor, (cst.For, cst.While)) and self.is_validation_loop(ancestor):
                return True
            if isinstance(ancestor, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
                comp: cst.CompFor | None = ancestor.for_in
                while comp is not None:
                    name = _last_identifier(comp.iter)
                    if name and _VALIDATION_LOADER.search(name):
                        return True
                    comp = comp.inner_for_in
        return False

    def epoch_loop(self, loop: Loop) -> Loop | None:
        """The loop around a training loop (over epochs), in the same or a calling function."""
        fn = self.function_of(loop)
        for ancestor in self.index.ancestors(loop):
            if ancestor is fn:
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                return ancestor
        if fn is None:
            return None
        for call in self.callers(fn):
            caller_fn = self.function_of(call)
            for ancestor in self.index.ancestors(call):
                if ancestor is caller_fn:
                    break
                if isinstance(ancestor, (cst.For, cst.While)):
                    return ancestor
        return None


@dataclass(frozen=True, eq=False)
class MicroBatchFinding:
    """Why a node runs per micro-batch: ``kind`` is "loop" (an inner micro-batch loop),
    "accumulate" (under or after an ``accumulate()`` block), or the kind of gate of the
    step it misses (``StepSummary.gate``: "guard", "keyword", "engine", "wrapper",
    "helper")."""

    anchor: Anchor
    kind: str
    # The accumulation guard (If), the accumulate() block (With), the inner loop, the
    # gating keyword (Arg) or call.
    where: cst.CSTNode
    step: cst.Call | None = None
    # Where the finding is: the node, or the call leading to it, in the function whose
    # pass runs it per micro-batch; ``scope`` is that pass (the loop, or the function).
    node: cst.CSTNode | None = None
    scope: cst.CSTNode | None = None

    @property
    def at(self) -> cst.CSTNode:
        return self.node if self.node is not None else self.anchor.node


@dataclass(frozen=True, eq=False)
class BeforeStep:
    """An update that runs before the optimizer step of the same iteration.

    ``node`` is where it sits in ``function`` (the update, or a call leading to it) and
    ``step`` the later call in the same function and iteration that steps the optimizer;
    ``loop`` is the training loop they run in (None: a step helper without a loop).
    """

    node: cst.CSTNode
    step: cst.Call
    function: cst.FunctionDef | None
    loop: Loop | None


class Placement:
    """Where an update sits relative to the optimizer step, and how to move it there.

    Used by the rules that report an update out of step with the optimizer and fix it by
    moving the update next to the step. A move is planned on statements: the statement to
    move (``movable``), the statement after which it goes (``after_step``), and whether
    the statements it would jump over read or write what it uses (``conflicts``).
    """

    def __init__(self, loops: TrainingLoops) -> None:
        self.loops = loops
        self.index = loops.index

    # Update before the step --------------------------------------------------------------
    def before_step(self, node: cst.CSTNode) -> BeforeStep | None:
        """The first of ``before_steps(node)``, or None."""
        found = self.before_steps(node)
        return found[0] if found else None

    def before_steps(self, node: cst.CSTNode) -> list[BeforeStep]:
        """For each path from a training loop to ``node`` (a helper holding the update is
        called from several places), the step that follows it in the same iteration,
        looked for from ``node``'s
        own function outwards through its callers up to the training loop. Without a loop
        in the module (a Lightning ``training_step`` with manual optimisation, a step
        function a framework calls), the functions from ``node``'s own outwards that step.

        A step in the other branch of an ``if``/``else`` neither precedes nor follows it;
        small loops (over parameter pairs, EMA rates) are part of the iteration around them.
        """
        loops = self.loops
        anchors = loops.anchors(node)
        chains: list[tuple[list[cst.CSTNode], cst.CSTNode | None, Loop | None]] = [
            ([node, *reversed(anchor.chain)], anchor.node, anchor.loop) for anchor in anchors
        ]
        if not anchors and loops.backward_calls:
            chains.append((loops.call_chain(node), None, None))
        found: list[BeforeStep] = []
        for levels, loop_node, loop in chains:
            for here in levels:
                fn = loops.function_of(here)
                at_loop = here is loop_node
                own_loop = loops.iteration_loop(here, fn)
                later: cst.Call | None = None
                earlier = False
                candidates = [
                    call
                    for call in loops.stepping_calls_in(fn)
                    if call is not here
                    and not loops.index.contains(call, here)
                    and not loops.index.contains(here, call)
                    and loops.iteration_loop(call, fn) is own_loop
                    and not loops.exclusive(call, here)
                    and not loops.runs_training_loop(call)
                ]
                # Several optimizers (a GAN's ``d_optim`` and ``g_optim``): the steps that
                # matter are those of the optimizer training the averaged model.
                # At a call leading to the update (a helper ``accumulate(g_ema, g_module,
                # decay)``), its arguments name the models too.
                trained = [self._trains(call, node, here) for call in candidates]
                if any(t is True for t in trained):
                    pairs = zip(candidates, trained, strict=True)
                    candidates = [c for c, t in pairs if t is not False]
                for call in candidates:
                    if self.index.is_before(here, call):
                        if not self._leaves_before(here, call):
                            later = later or call
                    else:
                        earlier = True
                if earlier:
                    break  # the update already follows a step of its iteration
                if later is not None:
                    if not any(f.node is here for f in found):
                        found.append(BeforeStep(here, later, fn, loop if at_loop else None))
                    break
                if at_loop:
                    break
        return found

    def _leaves_before(self, here: cst.CSTNode, step: cst.CSTNode) -> bool:
        """Whether the iteration leaves between ``here`` and the later ``step``: a block
        holding ``here`` (and not ``step``) goes on to ``continue``, ``break``, ``return``
        or ``raise`` (``if not sync: ...; update(); continue`` then the step)."""
        index = self.index
        node: cst.CSTNode | None = index.statement(here)
        while node is not None:
            block = index.parent(node)
            if block is None or index.contains(block, step):
                return False
            body = getattr(block, "body", None)
            if isinstance(body, (list, tuple)) and node in body:
                for statement in body[body.index(node) + 1 :]:
                    if isinstance(statement, cst.SimpleStatementLine) and any(
                        isinstance(s, (cst.Continue, cst.Break, cst.Return, cst.Raise))
                        for s in statement.body
                    ):
                        return True
            node = block
        return False

    def _trains(self, step: cst.Call, node: cst.CSTNode, here: cst.CSTNode) -> bool | None:
        """Whether ``step``'s optimizer trains the model the update ``node`` averages, asked
        of the update and of the call ``here`` that leads to it: True if either says so,
        False if one says not and none says so, None if neither knows."""
        answers = [self.loops.trains(step, node)]
        if here is not node:
            answers.append(self.loops.trains(step, here))
        if True in answers:
            return True
        return False if False in answers else None

    def _innermost_loop(self, node: cst.CSTNode, fn: cst.FunctionDef | None) -> Loop | None:
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                return None
            if isinstance(ancestor, (cst.For, cst.While)):
                return ancestor
        return None

    # Planning a move ----------------------------------------------------------------------
    def movable(
        self,
        node: cst.CSTNode,
        keep: set[int],
        leave: tuple[cst.CSTNode, ...] = (),
        within: cst.CSTNode | None = None,
    ) -> cst.BaseStatement | None:
        """The statement to move so that ``node`` runs elsewhere: the line holding it, or a
        compound statement around it that holds only updates (``if ema is not None:``,
        ``with torch.no_grad():``, the ``for`` over parameter pairs), given by the ids in
        ``keep``. None when moving it would take it out of a condition or a loop that also
        holds other code (other than the loops in ``leave``), or when the line holds more
        than the update.

        ``within`` is the block the statement is taken out of (the training loop).
        """
        statement = self.index.statement(node)
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        if not self._is_update_line(statement):
            return None
        current: cst.BaseStatement = statement
        while True:
            owner = self._owner(current)
            if owner is None or owner is within or any(owner is loop for loop in leave):
                break
            if not self._climbable(owner, keep):
                break
            current = owner
        # What is left between the statement and the block it is taken out of must not be
        # a condition or a loop it would silently leave.
        for ancestor in self.index.ancestors(current):
            if ancestor is within or isinstance(ancestor, (cst.FunctionDef, cst.Module)):
                break
            if any(ancestor is loop for loop in leave):
                continue
            if isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.Else)):
                return None
            if isinstance(ancestor, (cst.ExceptHandler, cst.Finally)):
                return None
        return current

    def _is_update_line(self, statement: cst.SimpleStatementLine) -> bool:
        small = statement.body[0]
        return isinstance(small, (cst.Expr, cst.Assign, cst.AugAssign))

    def _owner(self, statement: cst.CSTNode) -> cst.BaseCompoundStatement | None:
        """The compound statement whose body holds ``statement`` directly."""
        block = self.index.parent(statement)
        if not isinstance(block, cst.IndentedBlock):
            return None
        owner = self.index.parent(block)
        return owner if isinstance(owner, cst.BaseCompoundStatement) else None

    def _climbable(self, owner: cst.BaseCompoundStatement, keep: set[int]) -> bool:
        if isinstance(owner, cst.If) and owner.orelse is not None:
            return False
        if isinstance(owner, (cst.For, cst.While)):
            if owner.orelse is not None or any(owner is loop for loop in self.loops.train_loops):
                return False
        elif not isinstance(owner, (cst.If, cst.With)):
            return False
        body = owner.body
        if not isinstance(body, cst.IndentedBlock):
            return False
        return all(self._holds(statement, keep) for statement in body.body)

    def _holds(self, statement: cst.CSTNode, keep: set[int]) -> bool:
        if id(statement) in keep:
            return True
        return any(id(node) in keep for node in self.index.descendants(statement, cst.CSTNode))

    def after_step(self, step: cst.Call, loop: cst.CSTNode | None) -> cst.BaseStatement | None:
        """The statement after which an update goes to run right after ``step``: the
        statement holding the step in the innermost accumulation guard around it (or in the
        loop body, or the function body). A step in an ``if`` without ``else`` is
        conditional and the update goes right after it, inside; a step in each branch of an
        ``if``/``else`` gets the update after the whole statement."""
        fn = self.loops.function_of(step)
        guards = self.loops.guards(step, loop) if isinstance(loop, (cst.For, cst.While)) else []
        block_owner: cst.CSTNode | None = guards[0] if guards else loop
        if block_owner is None:
            block_owner = fn
        current = self.index.statement(step)
        while current is not None:
            owner = self._owner(current)
            if owner is block_owner or owner is None:
                break
            if isinstance(owner, cst.FunctionDef) or owner is fn:
                break
            if isinstance(owner, cst.Try) or (isinstance(owner, cst.If) and owner.orelse is None):
                break  # the step is conditional: the update goes with it
            current = owner
        if current is None or not isinstance(current, cst.BaseStatement):
            return None
        return current

    def conflicts(
        self, moved: cst.BaseStatement, target: cst.BaseStatement, objects: Iterable[str]
    ) -> bool:
        """Moving ``moved`` to right after ``target`` would change what it reads, or what
        the statements it jumps over read: a name it uses is assigned in between, or a
        statement in between reads the object it updates (``objects``: how the code spells
        it, ``ema``, ``self.ema``)."""
        start, end = (target, moved) if self.index.is_before(target, moved) else (moved, target)
        reads = _names_read(moved, self.index)
        spelled = set(objects)
        assigned: set[str] = set()
        for node in self._between(start, end, moved, target):
            assigned |= _names_assigned(node, self.index)
            if spelled & _codes_read(node, self.index):
                return True
        # Loop variables of the loops the statement leaves count as assigned in between.
        for ancestor in self.index.ancestors(moved):
            if self.index.contains(ancestor, target):
                break
            if isinstance(ancestor, cst.For):
                assigned |= _target_names(ancestor.target)
        return bool(reads & assigned)

    def _between(
        self,
        start: cst.CSTNode,
        end: cst.CSTNode,
        moved: cst.CSTNode,
        target: cst.CSTNode,
    ) -> Iterator[cst.CSTNode]:
        """Simple statements after ``start`` and before ``end`` (outside both)."""
        order = self.index.order
        lo, hi = order[id(start)], order[id(end)]
        fn = self.loops.function_of(start)
        for line in self.index.nodes(cst.SimpleStatementLine):
            position = order[id(line)]
            if not lo < position < hi:
                continue
            if self.index.contains(moved, line) or self.index.contains(target, line):
                continue
            if self.loops.function_of(line) is not fn:
                continue
            yield line

    def accumulate_owner(self, block: cst.With) -> cst.BaseExpression | None:
        """``accelerator`` in ``with accelerator.accumulate(model):``."""
        for item in block.items:
            call = item.item
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "accumulate"
            ):
                return call.func.value
        return None


_UNWRAP_ATTRIBUTES = ("module", "_orig_mod", "model")
_MOVES = ("to", "cuda", "cpu", "half", "float", "eval", "train", "requires_grad_")


def _model_roots(expr: cst.BaseExpression, depth: int = 0) -> set[str]:
    """The model an expression stands for, by name: ``generator`` for ``generator``,
    ``generator.module``, ``generator.to(device)``, ``DDP(generator, ...)``; ``model`` for
    ``self.model``. Empty for anything else (a constructor call, arithmetic)."""
    if depth > 4:
        return set()
    if isinstance(expr, cst.Name):
        return {expr.value}
    if isinstance(expr, cst.Attribute):
        if expr.attr.value in _UNWRAP_ATTRIBUTES:
            inner = _model_roots(expr.value, depth + 1)
            if inner:
                return inner
        return {expr.attr.value}
    if isinstance(expr, cst.IfExp):
        return _model_roots(expr.body, depth + 1) | _model_roots(expr.orelse, depth + 1)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MOVES:
            return _model_roots(func.value, depth + 1)
        if expr.args and expr.args[0].keyword is None and isinstance(expr.args[0].value, cst.Name):
            return {expr.args[0].value.value}
    return set()


def _target_names(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List)):
        found: set[str] = set()
        for element in node.elements:
            found |= _target_names(element.value)
        return found
    if isinstance(node, cst.StarredElement):
        return _target_names(node.value)
    return set()


def _names_assigned(node: cst.CSTNode, index) -> set[str]:
    found: set[str] = set()
    if isinstance(node, cst.SimpleStatementLine):
        for small in node.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    found |= _target_names(target.target)
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                found |= _target_names(small.target)
    for named in index.descendants(node, cst.NamedExpr):
        found |= _target_names(named.target)
    return found


def _names_read(node: cst.CSTNode, index) -> set[str]:
    return {n.value for n in index.descendants(node, cst.Name)}


def _codes_read(node: cst.CSTNode, index) -> set[str]:
    """Dotted names (``ema``, ``self.ema``, ``self.ema.module``) that ``node`` mentions."""
    found: set[str] = set()
    for sub in index.descendants(node, (cst.Name, cst.Attribute)):
        name = dotted_name(sub)
        if name:
            found.add(name)
    return found


def accumulation_steps(ctx: FileContext, finding: MicroBatchFinding) -> tuple[int, str] | None:
    """How many micro-batches one optimizer step spans, and the setting that says so:
    the ``k`` of the ``% k`` guard around the step, the ``gradient_accumulation_steps`` of
    the module's ``Accelerator(...)``, or the ``range(k)`` of an inner micro-batch loop."""
    from ema_lint.analysis.objects.run_length import RunLengths
    from ema_lint.analysis.syntax.values import ValueResolver

    resolver = ctx.get(ValueResolver)

    def number(expr: cst.BaseExpression | None) -> tuple[int, str] | None:
        if expr is None:
            return None
        value = resolver.resolve(expr)
        if value is None or not isinstance(value.value, int) or isinstance(value.value, bool):
            return None
        if value.value < 2:
            return None
        shown = ctx.code(expr)
        return value.value, shown

    if finding.kind in ("guard", "helper", "keyword") and finding.step is not None:
        guard = finding.where
        test = guard.test if isinstance(guard, cst.If) else getattr(guard, "value", None)
        if test is not None:
            for op in (test, *ctx.index.descendants(test, cst.BinaryOperation)):
                if isinstance(op, cst.BinaryOperation) and isinstance(op.operator, cst.Modulo):
                    found = number(op.right)
                    if found is not None:
                        return found
        count, _ = ctx.get(RunLengths).guard_interval(finding.step)
        return (count, str(count)) if count > 1 else None
    if finding.kind == "multisteps":
        for call in ctx.nodes(cst.Call):
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "every_k_schedule":
                    found = number(arg.value)
                    if found is not None:
                        return found
        return None
    if finding.kind in ("accumulate", "engine"):
        for call in ctx.nodes(cst.Call):
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "gradient_accumulation_steps":
                    found = number(arg.value)
                    if found is not None:
                        return found
        return None
    loop = finding.where
    if isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call):
        func = loop.iter.func
        if isinstance(func, cst.Name) and func.value == "range" and len(loop.iter.args) == 1:
            return number(loop.iter.args[0].value)
    return None
