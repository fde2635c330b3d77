"""Stochastic weight averaging in a module: where the average is updated, from when, under
which learning-rate schedule, where BatchNorm is recalibrated, and what uses the result.

The canonical shape (PyTorch's documentation, the original SWA repository)::

    for epoch in range(epochs):                  # the loop that updates the average
        train_one_epoch(model, train_loader)     # batch loops, here or in a function
        if epoch > swa_start:                    # the start condition
            swa_model.update_parameters(model)
            swa_scheduler.step()                 # SWALR
        else:
            scheduler.step()                     # the regular schedule, only before
    update_bn(train_loader, swa_model)           # after the last update
    evaluate(swa_model)                          # the use

Every piece may sit in another function of the module (``train(...)`` called from
``main()``, a ``Trainer`` class's methods), so each fact is found along the *path* from the
outermost loop of the run down through the calls to the ``update_parameters`` call:

- ``UpdateSite``: one update call, the loop that runs it (``loop``), the outermost loop of
  the run (``outer``, after which averaging is over: where ``update_bn`` belongs), the
  calls between them, the conditions on the way (``guards``) and the counted loops
  (``range(epochs)``) whose counter a start condition can test;
- ``SwaModel``: an ``AveragedModel`` (or mmengine ``StochasticWeightAverage``) object,
  equal-weight (SWA) or not, whether it averages buffers, its update sites, its
  ``update_bn`` calls and its uses (evaluated, saved, returned, swapped in);
- ``SwaStart``: when averaging starts relative to the run, from a loop condition, a
  Lightning ``StochasticWeightAveraging(swa_epoch_start=...)`` or an mmengine ``EMAHook``.

Nothing here judges; the EMA4xx rules do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import libcst as cst

from ema_lint.analysis.objects.api_calls import BoundCalls
from ema_lint.analysis.objects.apis import BoundCall, Role
from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects, Method
from ema_lint.analysis.objects.recalibration import LocalBnUpdates
from ema_lint.analysis.objects.schedulers import LrSchedulers, ScheduleKind, Scheduler
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.origins import SAME_OBJECT_METHODS, Origins
from ema_lint.analysis.syntax.values import Value, ValueResolver
from ema_lint.analysis.training.batches import BatchLoop, BatchLoops
from ema_lint.analysis.training.loops import Loop, TrainingLoops

_TRAINERS = {"lightning.pytorch.Trainer", "pytorch_lightning.Trainer", "lightning.Trainer"}
_WRAPPERS = {"tqdm", "iter", "trange_wrapper", "progress_bar", "track"}
# Calls that put trained weights into a model before the run (fine-tuning from them).
_LOADING = {"load_state_dict", "from_pretrained", "load_from_checkpoint", "load_checkpoint"}
_LOADING_FUNCTIONS = {"torch.load", "torch.hub.load", "timm.create_model"}
_NOT_USES = SAME_OBJECT_METHODS | {"zero_grad"}
_OPS = {
    cst.LessThan: "<",
    cst.LessThanEqual: "<=",
    cst.GreaterThan: ">",
    cst.GreaterThanEqual: ">=",
}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True, eq=False)
class Guard:
    """A condition on the path to an update: it runs when ``test`` holds (or, ``negated``,
    when it does not: the ``else`` branch, or after ``if test: continue``)."""

    test: cst.BaseExpression
    negated: bool
    node: cst.If
    level: int  # the function on the path: 0 is the outer loop's


@dataclass(frozen=True, eq=False)
class CounterLoop:
    """A loop on the path that counts: ``for epoch in range(a, b)``, ``while step < n``."""

    loop: Loop
    name: str
    start: float
    count: float
    stop: cst.BaseExpression
    stop_value: Value
    level: int
    unit: str  # "epoch" when it runs other training loops, else "step"


@dataclass(frozen=True, eq=False)
class SwaStart:
    """When averaging starts, and the setting that says so."""

    # The expression that sets the start where the code tests or passes it (None: the
    # API's default is in effect), and its resolved value (``origin``: the literal).
    setting: cst.BaseExpression | None
    value: Value | None
    first: float  # the first averaged epoch or step, counted from 0
    length: float  # epochs or steps in the run
    unit: str  # "epoch", "step" or "iteration"
    length_text: str  # how the code gives the run length, for messages
    # True when the setting is a fraction of the run (Lightning ``swa_epoch_start=0.5``).
    fractional: bool = False
    # For absolute settings: setting = first + offset (``epoch > s``: -1; 1-based: +1).
    offset: float = 0.0
    # Where the counted range starts (``range(1, epochs + 1)``).
    base: float = 0.0

    @property
    def fraction(self) -> float:
        return self.first / self.length if self.length > 0 else 1.0

    def setting_for(self, fraction: float) -> float:
        """The value of the setting that starts averaging at ``fraction`` of the run."""
        if self.fractional:
            return fraction
        return self.base + round(fraction * self.length) + self.offset


@dataclass(eq=False)
class UpdateSite:
    """One ``update_parameters`` call and the loops and conditions around it."""

    call: cst.Call
    loop: Loop | None = None  # the loop that runs the update (None: a hook or a callback)
    anchor: cst.CSTNode | None = None  # the node in ``loop``'s function that runs it
    chain: tuple[cst.Call, ...] = ()  # calls from ``loop``'s function down to ``call``
    outer: Loop | None = None  # the outermost loop of the run: averaging is over after it
    outer_chain: tuple[cst.Call, ...] = ()  # calls from ``outer``'s function to ``loop``'s
    guards: list[Guard] = field(default_factory=list)
    counters: list[CounterLoop] = field(default_factory=list)

    @property
    def full_chain(self) -> tuple[cst.Call, ...]:
        """Calls from ``outer``'s function down to the update."""
        return self.outer_chain + self.chain

    @property
    def path(self) -> tuple[cst.CSTNode, ...]:
        """The node leading to the update in each function, from ``outer``'s down."""
        return (*self.full_chain, self.call)


@dataclass(eq=False)
class ModelUse:
    """A use of the averaged weights: ``kind`` is "call", "method", "argument", "return",
    "attribute", "registered" (a submodule of an ``nn.Module``: saved with it) or "other"."""

    node: cst.CSTNode
    kind: str
    detail: str = ""
    # The average is loaded into the live model, which trains on (``_trains_on``).
    trains_on: bool = False


@dataclass(eq=False)
class SwaModel:
    """An averaged model the code updates itself (``AveragedModel``)."""

    obj: AveragingObject
    equal: bool  # an equal-weight average (SWA), not an EMA or a custom function
    buffers_averaged: bool | None  # use_buffers / update_buffers; None when unknown
    sites: list[UpdateSite] = field(default_factory=list)
    bn_calls: list[BoundCall] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.obj.name


class SwaAnalysis:
    """The SWA facts of one module."""

    MAX_DEPTH = 4

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.objects = ctx.get(AveragingObjects)
        self.models: list[SwaModel] = []
        self._uses: dict[int, list[ModelUse]] = {}
        self._target_steps: dict[int, list[tuple[cst.Call, Scheduler]]] = {}
        self._refs: dict[int, list[cst.Name | cst.Attribute]] | None = None
        self._params: frozenset[str] | None = None
        candidates = [
            o
            for o in self.objects.objects
            if o.spec is not None
            and o.spec.role is Role.SWA_MODEL
            and o.bound is not None
            and not o.virtual
            and o.bound.spec is o.spec
        ]
        if not candidates:
            self.bn_updates: list[BoundCall] = []
            return
        self.loops = ctx.get(TrainingLoops)
        self.resolver = ctx.get(ValueResolver)
        self.origins = ctx.get(Origins)
        self.bn_updates = [
            b for b in ctx.get(BoundCalls).calls if b.spec.role is Role.BN_UPDATE and not b.virtual
        ]
        self.bn_updates.extend(ctx.get(LocalBnUpdates).calls)  # the module's own update_bn
        for obj in candidates:
            model = SwaModel(obj, obj.kind is Method.SWA, self._buffers_averaged(obj))
            for update in obj.updates:
                if isinstance(update, cst.Call):
                    model.sites.append(self._site(update))
            for bn in self.bn_updates:
                arg = bn.value("model")
                if arg is not None and self.objects.for_expression(arg) is obj:
                    model.bn_calls.append(bn)
            self.models.append(model)

    @classmethod
    def build(cls, ctx: FileContext) -> SwaAnalysis:
        return cls(ctx)

    def model_of(self, obj: AveragingObject) -> SwaModel | None:
        return next((m for m in self.models if m.obj is obj), None)

    def _buffers_averaged(self, obj: AveragingObject) -> bool | None:
        spec, bound = obj.spec, obj.bound
        assert spec is not None and bound is not None
        if spec.buffers in ("yes", "no"):
            return spec.buffers == "yes"  # the API decides, whatever the call says
        param, _, default = spec.buffers.partition(":")
        if not default:
            return None
        expr = bound.value(param)
        if expr is None:
            return None if bound.has_star else default == "True"
        value = self.resolver.resolve(expr)
        return value.value if value is not None and isinstance(value.value, bool) else None

    # Update sites ----------------------------------------------------------------------------
    def _site(self, call: cst.Call) -> UpdateSite:
        site = UpdateSite(call)
        anchors = self.loops.anchors(call)
        if anchors:
            anchor = anchors[0]
            site.loop, site.anchor, site.chain = anchor.loop, anchor.node, anchor.chain
        else:
            fn = self.loops.function_of(call)
            for ancestor in self.index.ancestors(call):
                if ancestor is fn:
                    break
                if isinstance(ancestor, (cst.For, cst.While)):
                    site.loop, site.anchor = ancestor, call
                    break
        if site.loop is None:
            return site
        outer = self._outermost(site.loop)
        chain: tuple[cst.Call, ...] = ()
        for _ in range(self.MAX_DEPTH):
            fn = self.loops.function_of(outer)
            callers = self.loops.callers(fn) if fn is not None else []
            if len(callers) != 1:
                break
            caller = callers[0]
            enclosing = self._outermost(caller, inclusive=False)
            if enclosing is None:
                break
            outer, chain = enclosing, (caller, *chain)
        site.outer, site.outer_chain = outer, chain
        self._walk_path(site)
        return site

    def _outermost(self, node: cst.CSTNode, inclusive: bool = True) -> Loop | None:
        """The outermost loop holding ``node`` in its function (``node`` itself counts)."""
        found: Loop | None = node if inclusive and isinstance(node, (cst.For, cst.While)) else None
        fn = self.loops.function_of(node)
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                found = ancestor
        return found

    def _walk_path(self, site: UpdateSite) -> None:
        """Conditions and counted loops from the update up to ``outer``."""
        assert site.outer is not None
        path = site.path
        for level in range(len(path) - 1, -1, -1):
            node = path[level]
            fn = self.loops.function_of(node)
            child: cst.CSTNode = node
            for ancestor in self.index.ancestors(node):
                if ancestor is fn:
                    break
                if isinstance(ancestor, cst.If):
                    negated = not self.index.contains(ancestor.body, node)
                    site.guards.append(Guard(ancestor.test, negated, ancestor, level))
                elif isinstance(ancestor, (cst.For, cst.While)):
                    self._loop_facts(site, ancestor, child, level)
                if ancestor is site.outer:
                    break
                child = ancestor

    def _loop_facts(self, site: UpdateSite, loop: Loop, child: cst.CSTNode, level: int) -> None:
        body = loop.body
        if isinstance(body, cst.IndentedBlock):
            for statement in body.body:
                if statement is child or self.index.contains(statement, child):
                    break
                if isinstance(statement, cst.If) and _only_continue(statement):
                    site.guards.append(Guard(statement.test, True, statement, level))
        counter = self._counter(loop, level)
        if counter is not None:
            site.counters.append(counter)

    def _counter(self, loop: Loop, level: int) -> CounterLoop | None:
        batches = self.ctx.get(BatchLoops)
        unit = "step" if batches.is_batch_loop(loop) else "epoch"
        if isinstance(loop, cst.For):
            if not isinstance(loop.target, cst.Name):
                return None
            node = loop.iter
            while (
                isinstance(node, cst.Call)
                and node.args
                and (dotted_name(node.func) or "").rsplit(".", 1)[-1] in _WRAPPERS
            ):
                node = node.args[0].value
            if not (isinstance(node, cst.Call) and dotted_name(node.func) in ("range", "trange")):
                return None
            args = [a.value for a in node.args if a.keyword is None and not a.star]
            if not 1 <= len(args) <= 2 or len(args) != len(node.args):
                return None
            values = [self.resolver.resolve(a) for a in args]
            if any(v is None or v.number is None for v in values):
                if len(args) == 2 and values[1] is not None and values[1].number is not None:
                    values[0] = Value(0, None)  # range(start_epoch, epochs): a resume point
                else:
                    return None
            start = values[0].number if len(args) == 2 else 0.0  # type: ignore[union-attr]
            stop_value = values[-1]
            assert stop_value is not None and stop_value.number is not None
            count = stop_value.number - (start or 0.0)
            if count <= 0:
                return None
            return CounterLoop(
                loop, loop.target.value, start or 0.0, count, args[-1], stop_value, level, unit
            )
        test = loop.test
        if (
            isinstance(test, cst.Comparison)
            and len(test.comparisons) == 1
            and isinstance(test.left, cst.Name)
            and isinstance(test.comparisons[0].operator, (cst.LessThan, cst.LessThanEqual))
        ):
            stop = test.comparisons[0].comparator
            value = self.resolver.resolve(stop)
            if value is None or value.number is None or value.number <= 0:
                return None
            count = value.number + (
                1 if isinstance(test.comparisons[0].operator, cst.LessThanEqual) else 0
            )
            return CounterLoop(loop, test.left.value, 0.0, count, stop, value, level, unit)
        return None

    # Start -------------------------------------------------------------------------------------
    def start(self, site: UpdateSite) -> SwaStart | None:
        """When the average starts, from a condition on a counted loop, if it resolves."""
        for guard in site.guards:
            for left, op, right in self._comparisons(guard):
                found = self._bound(site, guard, left, op, right)
                if found is not None:
                    return found
        return None

    def _comparisons(self, guard: Guard):
        tests: list[cst.BaseExpression] = []
        if guard.negated:
            if isinstance(guard.test, cst.Comparison):
                tests.append(guard.test)
        else:
            tests.extend(_conjuncts(guard.test))
        for test in tests:
            if not isinstance(test, cst.Comparison):
                continue
            left = test.left
            for item in test.comparisons:
                op = _OPS.get(type(item.operator))
                if op is not None:
                    if guard.negated:
                        op = _NEGATE[op]
                    yield left, op, item.comparator
                left = item.comparator

    def _bound(
        self,
        site: UpdateSite,
        guard: Guard,
        left: cst.BaseExpression,
        op: str,
        right: cst.BaseExpression,
    ) -> SwaStart | None:
        for counter_side, bound_side, operator in ((left, right, op), (right, left, _flip(op))):
            if operator not in (">", ">="):
                continue
            matched = self._counted(site, guard, counter_side)
            if matched is None:
                continue
            counter, k = matched
            value = self.resolver.resolve(bound_side)
            if value is None or value.number is None:
                return None
            s = value.number
            first = math.ceil(s - k) if operator == ">=" else math.floor(s - k) + 1
            return SwaStart(
                bound_side,
                value,
                max(first - counter.start, 0.0),
                counter.count,
                counter.unit,
                self._length_text(counter),
                offset=s - first,
                base=counter.start,
            )
        return None

    def _counted(
        self, site: UpdateSite, guard: Guard, expr: cst.BaseExpression
    ) -> tuple[CounterLoop, float] | None:
        """``epoch`` / ``epoch + 1`` / ``step - 1`` where the name is a loop counter."""
        k = 0.0
        if isinstance(expr, cst.BinaryOperation) and isinstance(
            expr.operator, (cst.Add, cst.Subtract)
        ):
            amount = self.resolver.number(expr.right)
            if amount is None or not isinstance(expr.left, cst.Name):
                return None
            k = amount if isinstance(expr.operator, cst.Add) else -amount
            expr = expr.left
        if not isinstance(expr, cst.Name):
            return None
        full = site.full_chain
        for counter in site.counters:
            if counter.level > guard.level:
                continue
            lifted = self.origins.lift_through(expr, full[counter.level : guard.level])
            if (
                isinstance(lifted, cst.Name)
                and lifted.value == counter.name
                and self.index.contains(counter.loop, lifted)
            ):
                return counter, k
        return None

    def _length_text(self, counter: CounterLoop) -> str:
        code = self.ctx.code(counter.stop).strip()
        number = _format(counter.stop_value.number or 0)
        shown = counter.stop_value.via or code
        return f"range({number})" if shown == number else f"{shown} = {number}"

    def conditional(self, site: UpdateSite) -> bool:
        """Whether something on the path may hold the update back on some iterations
        (a start condition or any test that is not an accumulation guard or a constant)."""
        for guard in site.guards:
            if self._constant_flag(guard.test):
                continue
            if self.loops.is_accumulation_guard(guard.node) and not any(
                isinstance(c, cst.Comparison)
                and any(type(i.operator) in _OPS for i in c.comparisons)
                for c in (guard.test, *self.index.descendants(guard.test, cst.Comparison))
            ):
                continue
            return True
        return False

    def _constant_flag(self, test: cst.BaseExpression) -> bool:
        """``if args.swa:`` / ``if USE_SWA:``: the same on every iteration."""
        if not isinstance(test, (cst.Name, cst.Attribute)):
            return False
        value = self.resolver.resolve(test)
        return value is not None and isinstance(value.value, bool)

    def callback_start(self, obj: AveragingObject) -> SwaStart | None:
        """The start of a Lightning ``StochasticWeightAveraging`` or an mmengine ``EMAHook``
        building ``StochasticWeightAverage``."""
        bound = obj.bound
        if bound is None or obj.kind is not Method.SWA:
            return None
        if bound.spec.short_name == "StochasticWeightAveraging":
            return self._lightning_start(obj, bound)
        if bound.spec.forwards_to is not None:
            return self._mmengine_start(bound)
        return None

    def _lightning_start(self, obj: AveragingObject, bound: BoundCall) -> SwaStart | None:
        arg = bound.arg("swa_epoch_start")
        if not isinstance(arg, cst.Arg) or arg.keyword is None:
            return None  # the default (0.8), or positional (its place changed in Lightning 2)
        value = self.ctx.get(ValueResolver).resolve(arg.value)
        if value is None or value.number is None or isinstance(value.value, bool):
            return None
        epochs = self._max_epochs(obj.creation)
        if isinstance(value.value, float):
            if epochs is None:
                return SwaStart(arg.value, value, value.number, 1.0, "run", "", fractional=True)
            first = max(int(epochs[0] * value.number) - 1, 0)
            return SwaStart(arg.value, value, first, epochs[0], "epoch", epochs[1], True)
        if epochs is None:
            return None
        first = max(value.number - 1, 0)
        return SwaStart(arg.value, value, first, epochs[0], "epoch", epochs[1], offset=1.0)

    def _max_epochs(self, creation: cst.CSTNode) -> tuple[float, str] | None:
        imports = self.ctx.get(ImportTable)
        trainers = [
            c for c in self.ctx.nodes(cst.Call) if imports.resolve(c.func, _TRAINERS) is not None
        ]
        holding = [t for t in trainers if self.index.contains(t, creation)]
        trainer = holding[0] if holding else (trainers[0] if len(trainers) == 1 else None)
        if not isinstance(trainer, cst.Call):
            return None
        for arg in trainer.args:
            if arg.keyword is not None and arg.keyword.value == "max_epochs":
                value = self.ctx.get(ValueResolver).resolve(arg.value)
                if value is not None and value.number is not None and value.number > 0:
                    code = self.ctx.code(arg.value).strip()
                    number = _format(value.number)
                    text = (
                        f"max_epochs={number}"
                        if code == number
                        else f"max_epochs={code} = {number}"
                    )
                    return value.number, text
        return None

    def _mmengine_start(self, bound: BoundCall) -> SwaStart | None:
        resolver = self.ctx.get(ValueResolver)
        for param, key in (("begin_epoch", "max_epochs"), ("begin_iter", "max_iters")):
            length = self._train_cfg(key)
            expr = bound.value(param)
            if expr is None:
                continue
            value = resolver.resolve(expr)
            if value is None or value.number is None or length is None:
                return None
            unit = "epoch" if param == "begin_epoch" else "iteration"
            return SwaStart(expr, value, value.number, length[0], unit, length[1])
        if bound.has_star:
            return None
        length = self._train_cfg("max_epochs")
        if length is None:
            return None
        return SwaStart(None, None, 0.0, length[0], "epoch", length[1])

    def _train_cfg(self, key: str) -> tuple[float, str] | None:
        resolver = self.ctx.get(ValueResolver)
        for statement in self.ctx.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == "train_cfg"
                ):
                    mapping = resolver.mapping(small.value)
                    if mapping is None:
                        return None
                    items = dict(resolver.mapping_items(mapping))
                    if key in items:
                        number = resolver.number(items[key])
                        if number is not None and number > 0:
                            return number, f"train_cfg {key}={_format(number)}"
        return None

    def loads_trained_weights(self) -> bool:
        """The module loads weights into a model (a fine-tune, or an SWA-only phase)."""
        imports = self.ctx.get(ImportTable)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in _LOADING:
                return True
            if imports.resolve(func, _LOADING_FUNCTIONS) is not None:
                return True
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in ("pretrained", "weights"):
                    value = self.resolver.resolve(arg.value)
                    if value is None or value.value not in (False, None):
                        return True
        return False

    def separate_phase(self, site: UpdateSite) -> bool:
        """Another training loop runs outside the one that averages: the averaging loop is a
        phase of its own after regular training (or the averaging loop counts SWA epochs)."""
        assert site.outer is not None
        loops = {id(c.loop): c.loop for c in site.counters}
        loops.update({id(x): x for x in (site.loop, site.outer) if x is not None})
        for loop in loops.values():
            if isinstance(loop, cst.For) and "swa" in self.ctx.code(loop.iter).lower():
                return True  # range(swa_epochs), range(args.swa_start, args.epochs)
        running = self._functions_run_by(site.outer)
        for loop in self.loops.train_loops:
            if self.index.contains(site.outer, loop) or self.index.contains(loop, site.outer):
                continue
            if id(self.loops.function_of(loop)) in running:
                continue
            return True
        return False

    def _functions_run_by(self, node: cst.CSTNode) -> set[int]:
        found: set[int] = set()
        frontier = [node]
        for _ in range(self.MAX_DEPTH):
            nxt: list[cst.CSTNode] = []
            for scope in frontier:
                fn = (
                    self.loops.function_of(scope)
                    if not isinstance(scope, cst.FunctionDef)
                    else scope
                )
                for call in self.loops.calls_in(fn):
                    if not self.index.contains(scope, call):
                        continue
                    for target in self.loops.local_targets(call):
                        if id(target) not in found:
                            found.add(id(target))
                            nxt.append(target)
            frontier = nxt
        return found

    # update_bn -------------------------------------------------------------------------------
    def bn_placement(self, bn: BoundCall, model: SwaModel) -> str:
        """ "after" the last update of ``model`` (in the run's order), "before" one, or
        "unknown" (in a function not on the path to an update, nor called from one)."""
        results: list[str] = []
        for site in model.sites:
            if site.outer is not None:
                results.extend(self._placement(bn.call, site, 0))
        if "before" in results:
            return "before"
        return "after" if results else "unknown"

    def _placement(self, node: cst.CSTNode, site: UpdateSite, depth: int) -> list[str]:
        fn = self.loops.function_of(node)
        for step in site.path:
            if self.loops.function_of(step) is fn:
                return ["after" if self.index.is_before(step, node) else "before"]
        if fn is None or depth >= self.MAX_DEPTH:
            return []
        found: list[str] = []
        for caller in self.loops.callers(fn):
            found.extend(self._placement(caller, site, depth + 1))
        return found

    def live_bn_calls(self, model: SwaModel) -> list[BoundCall]:
        """``update_bn`` calls given the model that ``model`` averages, not ``model``."""
        source = model.obj.source
        if source is None:
            return []
        made = self.origins.creation(source)
        found: list[BoundCall] = []
        for bn in self.bn_updates:
            arg = bn.value("model")
            if arg is None or self.objects.for_expression(arg) is not None:
                continue
            same = self.ctx.code(arg) == self.ctx.code(source) or (
                made is not None and self.origins.creation(arg) is made
            )
            if same and not self._swapped_into(arg, model):
                found.append(bn)
        return found

    def unidentified_bn_calls(self) -> list[BoundCall]:
        """``update_bn`` calls whose model is neither an averaged model nor the live model
        of one (``for m in models: update_bn(loader, m)``): they may recalibrate any."""
        live = {id(b) for m in self.models for b in self.live_bn_calls(m)}
        return [
            b
            for b in self.bn_updates
            if id(b) not in live
            and (arg := b.value("model")) is not None
            and self.objects.for_expression(arg) is None
        ]

    def _swapped_into(self, target: cst.BaseExpression, model: SwaModel) -> bool:
        """Whether the averaged weights are loaded into ``target``'s model somewhere."""
        made = self.origins.creation(target)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"):
                continue
            receiver_same = self.ctx.code(func.value) == self.ctx.code(target) or (
                made is not None and self.origins.creation(func.value) is made
            )
            if receiver_same and any(self._mentions(a.value, model.obj) for a in call.args):
                return True
        return False

    def _mentions(self, node: cst.CSTNode, obj: AveragingObject) -> bool:
        candidates = [node, *self.index.descendants(node, (cst.Name, cst.Attribute))]
        return any(
            isinstance(c, (cst.Name, cst.Attribute)) and self.objects.for_expression(c) is obj
            for c in candidates
        )

    # Uses --------------------------------------------------------------------------------------
    def applies(self, model: SwaModel) -> list[ModelUse]:
        """The calls that put the average into the model where its API keeps it apart
        (SWAG's ``sample()``: before it, the model holds weights of its own making)."""
        spec = model.obj.spec
        methods = spec.apply_methods if spec is not None else ()
        return [u for u in self.uses(model) if u.kind == "method" and u.detail in methods]

    def uses(self, model: SwaModel) -> list[ModelUse]:
        """Where the averaged weights are used: called, passed on, saved, returned."""
        key = id(model)
        if key not in self._uses:
            self._uses[key] = self._find_uses(model)
        return self._uses[key]

    def _find_uses(self, model: SwaModel) -> list[ModelUse]:
        obj = model.obj
        found: list[ModelUse] = []
        done: set[int] = set()
        updates = {id(u) for u in obj.updates}
        bn_calls = {id(b.call) for b in self.bn_updates}
        names = self._names_that_may_refer(obj)
        for node in self._references().get(id(obj), []):
            parent = self.index.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue
            root: cst.CSTNode = node
            while isinstance(root, cst.Attribute):
                root = root.value
            if not isinstance(root, cst.Name) or root.value not in names:
                continue
            if self.objects.for_expression(node) is not obj:  # type: ignore[arg-type]
                continue
            ref: cst.CSTNode = node
            parent = self.index.parent(ref)
            while (
                isinstance(parent, cst.Attribute)
                and parent.value is ref
                and self.objects.for_expression(parent) is obj
            ):
                ref, parent = parent, self.index.parent(parent)
            if id(ref) in done:
                continue
            done.add(id(ref))
            use = self._classify(ref, parent, obj, updates, bn_calls)
            if use is not None:
                use.trains_on = self._trains_on(use, model)
                found.append(use)
        if any(self._registered(b) for b in obj.bindings):
            found.append(ModelUse(obj.creation, "registered"))
        return found

    def _trains_on(self, use: ModelUse, model: SwaModel) -> bool:
        """``state.model.load_state_dict(swa.module.state_dict())`` in the hook that updates
        the average (no loop of its own: the trainer calls it on every step, composer's
        ``swa_end``): the live model takes the average and trains on, which re-estimates its
        BatchNorm statistics: a use of the average that needs no ``update_bn``."""
        if use.kind != "method" or use.detail != "state_dict" or model.obj.source is None:
            return False
        arg = self.index.parent(use.node)
        call = self.index.parent(arg) if isinstance(arg, cst.Arg) else None
        if not (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "load_state_dict"
            and self.ctx.code(call.func.value).strip() == self.ctx.code(model.obj.source).strip()
        ):
            return False
        function = self.index.enclosing(call, cst.FunctionDef)
        return any(
            site.outer is None and self.index.enclosing(site.call, cst.FunctionDef) is function
            for site in model.sites
        )

    def _references(self) -> dict[int, list[cst.Name | cst.Attribute]]:
        """The names and attribute chains that may refer to each model's object, by object,
        in the order ``_find_uses`` reads them: one pass for all the models."""
        found = self._refs
        if found is None:
            found = self._refs = {}
            names: set[str] = set()
            for model in self.models:
                names |= self._names_that_may_refer(model.obj)
            for node in self._rooted_at(names):
                parent = self.index.parent(node)
                if isinstance(parent, cst.Attribute) and parent.attr is node:
                    continue
                obj = self.objects.for_expression(node)
                if obj is not None:
                    found.setdefault(id(obj), []).append(node)
        return found

    def _rooted_at(self, names: set[str]) -> list[cst.Name | cst.Attribute]:
        """Names spelled one of ``names``, then attributes rooted at one, each in document
        order (from the index's table, not a scan of every name of the module)."""
        order = self.index.order
        spelled: list[cst.Name] = []
        chains: list[cst.Attribute] = []
        for name in names:
            found = self.index.rooted_at(name)
            spelled.extend(found[0])
            chains.extend(found[1])
        spelled.sort(key=lambda n: order[id(n)])
        chains.sort(key=lambda n: order[id(n)])
        return [*spelled, *chains]

    def _names_that_may_refer(self, obj: AveragingObject) -> set[str]:
        """A cheap superset of the names an expression referring to ``obj`` can start
        with: its bindings, parameters (it may be passed), and names assigned from those."""
        names = {"self", "cls"}
        for binding in obj.bindings:
            root: cst.CSTNode = binding
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name):
                names.add(root.value)
        return names | self._parameter_names()

    def _parameter_names(self) -> frozenset[str]:
        """The names of every function parameter of the module (read once per module)."""
        if self._params is None:
            found: set[str] = set()
            for function in self.ctx.nodes(cst.FunctionDef):
                assert isinstance(function, cst.FunctionDef)
                params = function.params
                found.update(p.name.value for p in (*params.params, *params.kwonly_params))
                found.update(p.name.value for p in params.posonly_params)
            self._params = frozenset(found)
        return self._params

    def _classify(
        self,
        ref: cst.CSTNode,
        parent: cst.CSTNode | None,
        obj: AveragingObject,
        updates: set[int],
        bn_calls: set[int],
    ) -> ModelUse | None:
        if isinstance(parent, (cst.AssignTarget, cst.AugAssign)):
            return None
        if isinstance(parent, cst.AnnAssign) and parent.target is ref:
            return None
        if isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is ref:
            return None  # an alias: its own uses count
        if isinstance(parent, (cst.For, cst.Tuple, cst.List)) and self._in_target(ref):
            return None
        if isinstance(parent, cst.Attribute) and parent.value is ref:
            grand = self.index.parent(parent)
            method = parent.attr.value
            if isinstance(grand, cst.Call) and grand.func is parent:
                if id(grand) in updates:
                    return None
                if method in SAME_OBJECT_METHODS:
                    # ``swa.module.cpu().state_dict()``: the result is the model itself, so
                    # what happens to it is what happens to the model; ``swa.eval()`` alone
                    # on its line is no use.
                    outer = self.index.parent(grand)
                    if isinstance(outer, cst.Expr):
                        return None
                    return self._classify(grand, outer, obj, updates, bn_calls)
                if method in _NOT_USES or method == "load_state_dict":
                    return None  # ``swa.load_state_dict(ckpt)`` (a resume) writes into it
                if method == "state_dict" and self._in_method_named(grand, "state_dict"):
                    return None  # the object's own ``state_dict()``: a checkpoint to resume
                return ModelUse(grand, "method", method)
            return ModelUse(parent, "attribute", method)
        if isinstance(parent, cst.Call) and parent.func is ref:
            return None if id(parent) in updates else ModelUse(parent, "call")
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            if not isinstance(call, cst.Call):
                return ModelUse(ref, "other")
            if id(call) in bn_calls or id(call) in updates or call is obj.creation:
                return None
            targets = self.loops.local_targets(call)
            if targets and all(self._followed_into(call, parent, t, obj) for t in targets):
                return None  # followed inside the function
            return ModelUse(call, "argument", dotted_name(call.func) or "")
        if isinstance(parent, cst.Return):
            return ModelUse(parent, "return")
        if self._presence_test(ref, parent):
            return None
        return ModelUse(ref, "other")

    def _presence_test(self, ref: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
        """``assert swa``, ``if swa is not None:``, ``not swa``, ``swa and ...``: whether the
        average exists, not its weights."""
        if isinstance(parent, (cst.Assert, cst.If, cst.While, cst.IfExp)):
            return getattr(parent, "test", None) is ref
        if isinstance(parent, cst.UnaryOperation):
            return isinstance(parent.operator, cst.Not)
        if isinstance(parent, cst.BooleanOperation):
            # ``if swa and ready:``; not ``return swa or model`` (the value is used).
            return self._presence_test(parent, self.index.parent(parent))
        if isinstance(parent, cst.Comparison):
            return all(
                isinstance(c.operator, (cst.Is, cst.IsNot))
                and isinstance(c.comparator, cst.Name)
                and c.comparator.value == "None"
                for c in parent.comparisons
            )
        return False

    def _in_method_named(self, node: cst.CSTNode, name: str) -> bool:
        function = self.index.enclosing(node, cst.FunctionDef)
        return isinstance(function, cst.FunctionDef) and function.name.value == name

    def _followed_into(
        self, call: cst.Call, arg: cst.Arg, function: cst.FunctionDef, obj: AveragingObject
    ) -> bool:
        """Whether the uses of ``obj`` inside ``function`` are found through its parameter.

        The averaging model maps a parameter to one object; a function called with two
        averaged models (``evaluate(swa_a)``, ``evaluate(swa_b)``) maps it to one of them, so
        for the other the call itself is the use.
        """
        params = function.params
        positional = [*params.posonly_params, *params.params]
        if arg.keyword is not None:
            names = [p.name.value for p in (*positional, *params.kwonly_params)]
            name = arg.keyword.value if arg.keyword.value in names else None
        else:
            index = [a for a in call.args if a.keyword is None].index(arg)
            if (
                isinstance(call.func, cst.Attribute)
                and self.loops.class_of(function) is not None
                and positional
                and positional[0].name.value in ("self", "cls")
            ):
                index += 1  # a method: the receiver fills the first parameter
            name = positional[index].name.value if index < len(positional) else None
        if name is None:
            return False
        references = [
            node
            for node in self.index.descendants(function.body, cst.Name)
            if isinstance(node, cst.Name) and node.value == name
        ]
        # A parameter the function never reads is no use of what is passed to it.
        return not references or any(self.objects.for_expression(n) is obj for n in references)

    def _in_target(self, ref: cst.CSTNode) -> bool:
        for ancestor in self.index.ancestors(ref):
            if isinstance(ancestor, cst.For):
                return self.index.contains(ancestor.target, ref)
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _registered(self, binding: cst.BaseExpression) -> bool:
        """``self.swa_model = AveragedModel(...)`` in an ``nn.Module`` (saved with it), or
        in a class with a base this module does not show (which may use it)."""
        if not (
            isinstance(binding, cst.Attribute)
            and isinstance(binding.value, cst.Name)
            and binding.value.value == "self"
        ):
            return False
        cls = self.resolver.class_of_self(binding)
        return cls is not None and self._has_outside_base(cls, 0)

    def _has_outside_base(self, cls: cst.ClassDef, depth: int) -> bool:
        local = {
            c.name.value: c for c in self.ctx.nodes(cst.ClassDef) if isinstance(c, cst.ClassDef)
        }
        for base in cls.bases:
            value = base.value
            if isinstance(value, cst.Name) and value.value == "object":
                continue
            if isinstance(value, cst.Name) and value.value in local and depth < self.MAX_DEPTH:
                if self._has_outside_base(local[value.value], depth + 1):
                    return True
                continue
            return True  # nn.Module, LightningModule, or a class from elsewhere
        return False

    # Spelling for fixes ------------------------------------------------------------------------
    def spelled_at_outer(self, model: SwaModel, site: UpdateSite) -> cst.BaseExpression | None:
        """The averaged model as the function holding ``site.outer`` can write it."""
        receiver = site.call.func
        if isinstance(receiver, cst.Attribute):
            lifted = self.origins.lift_through(receiver.value, site.full_chain)
            if lifted is not None and self.objects.for_expression(lifted) is model.obj:
                return lifted
            if lifted is not None and not self._in_tree(lifted):
                return lifted
        return None

    def _in_tree(self, node: cst.CSTNode) -> bool:
        return id(node) in self.index.order

    def batch_loops(self, site: UpdateSite) -> list[BatchLoop]:
        """The batch loops an iteration of the averaging loop runs."""
        if site.loop is None:
            return []
        return self.ctx.get(BatchLoops).run_by(site.loop)

    def at_outer(self, site: UpdateSite, batch: BatchLoop, expr: cst.BaseExpression):
        """An expression of a batch loop, as ``site.outer``'s function writes it."""
        return self.origins.lift_through(expr, site.outer_chain + batch.chain)

    # Schedules ---------------------------------------------------------------------------------
    def scheduler_steps(self, site: UpdateSite) -> list[tuple[cst.Call, Scheduler]]:
        """Scheduler ``.step()`` calls that run in the iterations that update the average."""
        if site.loop is None or site.anchor is None:
            return []
        schedulers = self.ctx.get(LrSchedulers)
        if not schedulers.schedulers:
            return []
        found: list[tuple[cst.Call, Scheduler]] = []
        fn = self.loops.function_of(site.loop)
        for call in self.loops.calls_in(fn):
            if not self.index.contains(site.loop, call):
                continue
            if self._excluded(call, site.loop, site.anchor):
                continue
            scheduler = schedulers.of_step(call)
            if scheduler is not None:
                found.append((call, scheduler))
                continue
            reached: dict[int, tuple[cst.Call, Scheduler]] = {}
            for target in self.loops.local_targets(call):
                for step in self._steps_in_target(target, 0, set()):
                    reached.setdefault(id(step[0]), step)
            found.extend(reached.values())
        return found

    def _steps_in_target(
        self, target: cst.FunctionDef, depth: int, stack: set[int]
    ) -> list[tuple[cst.Call, Scheduler]]:
        """The scheduler steps a call of the module's function ``target`` runs, through the
        functions it calls in turn: once per function, not once per call reaching it."""
        key = id(target)
        known = self._target_steps.get(key)
        if known is not None:
            return known
        if depth >= self.MAX_DEPTH or key in stack:
            return []
        stack.add(key)
        schedulers = self.ctx.get(LrSchedulers)
        found: dict[int, tuple[cst.Call, Scheduler]] = {}
        for inner in self.loops.calls_in(target):
            if self._excluded(inner, target, None):
                continue
            scheduler = schedulers.of_step(inner)
            if scheduler is not None:
                found.setdefault(id(inner), (inner, scheduler))
                continue
            for callee in self.loops.local_targets(inner):
                for step in self._steps_in_target(callee, depth + 1, stack):
                    found.setdefault(id(step[0]), step)
        stack.discard(key)
        steps = list(found.values())
        if depth == 0 or steps:
            self._target_steps[key] = steps  # a cut-off (depth, cycle) below is not final
        return steps

    def _excluded(self, node: cst.CSTNode, scope: cst.CSTNode, anchor: cst.CSTNode | None) -> bool:
        """Whether a condition between ``scope`` and ``node`` may skip it while ``anchor``
        runs: a different branch of an ``if`` holding both, or an ``if`` not holding the
        anchor (accumulation guards and ``if scheduler is not None`` excepted)."""
        for ancestor in self.index.ancestors(node):
            if ancestor is scope:
                return False
            if not isinstance(ancestor, cst.If):
                continue
            if anchor is not None and self.index.contains(ancestor, anchor):
                if self.index.contains(ancestor.body, node) != self.index.contains(
                    ancestor.body, anchor
                ):
                    return True
                continue
            if self.loops.is_accumulation_guard(ancestor) or _presence_test(ancestor.test):
                continue
            return True
        return False

    def swalr(self) -> list[Scheduler]:
        return self.ctx.get(LrSchedulers).of_kind(ScheduleKind.SWA)


def _only_continue(node: cst.If) -> bool:
    body = node.body
    if isinstance(body, cst.IndentedBlock):
        statements = body.body
        return (
            len(statements) >= 1
            and isinstance(statements[-1], cst.SimpleStatementLine)
            and any(isinstance(s, cst.Continue) for s in statements[-1].body)
            and node.orelse is None
        )
    if isinstance(body, cst.SimpleStatementSuite):
        return any(isinstance(s, cst.Continue) for s in body.body) and node.orelse is None
    return False


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return [*_conjuncts(test.left), *_conjuncts(test.right)]
    return [test]


def _flip(op: str) -> str:
    return {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]


def _presence_test(test: cst.BaseExpression) -> bool:
    """``if scheduler is not None:`` / ``if scheduler:``."""
    if isinstance(test, (cst.Name, cst.Attribute)):
        return True
    return (
        isinstance(test, cst.Comparison)
        and len(test.comparisons) == 1
        and isinstance(test.comparisons[0].operator, cst.IsNot)
        and isinstance(test.comparisons[0].comparator, cst.Name)
        and test.comparisons[0].comparator.value == "None"
    )


def _format(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"
