"""Every averaging weight set through an API, read the way an expert reads it.

A ``DecaySetting`` is one place where a library's averaging weight is configured (a real or
virtual call), with everything the value rules need: the value and where it came from, its
semantics converted to a decay D (weight on the old average), whether a warmup makes it a
ceiling, the update interval that stretches it, and the averaging object it configures
(hence its use: evaluation EMA, teacher, target network, not weights).

Horizons are in optimizer steps: an object that averages every k-th step with decay D has
per-step decay D^(1/k) and a horizon of about k / (1 - D) steps.

Hand-written updates of an averaging object (``e.mul_(d).add_(p, alpha=1 - d)``,
``e.lerp_(p, w)``, ``e.copy_(d * e + (1 - d) * p)``, the ``.data =`` and ``_foreach``
forms, recognised by ``InPlaceUpdates``) are settings too, with a virtual call to a
"hand-made update": their decay is read from the update's coefficients, but only when the
update is unambiguous (its two coefficients resolve and sum to one), so that the value
rules judge them like an API's argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import libcst as cst

from ema_lint.analysis.objects.api_calls import BoundCalls, swapped_trees
from ema_lint.analysis.objects.apis import (
    NOT_NONE,
    REQUIRED,
    ApiSpec,
    BoundCall,
    Ramp,
    Role,
    Side,
    Weight,
    bind_arguments,
)
from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects, Use, named_use
from ema_lint.analysis.objects.run_length import RunLength, RunLengths
from ema_lint.analysis.objects.updates import Coefficient, InPlaceUpdate, InPlaceUpdates
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import (
    Value,
    ValueResolver,
    is_time_constant,
    literal_number,
)
from ema_lint.analysis.syntax.vocabulary import tokens
from ema_lint.analysis.training.forwarded import (
    ForwardedCall,
    ForwardedWeight,
    forwarding_parameter,
    passed_value,
)

from ..syntax.params import all_params

# The virtual API of a hand-written update: its weight is read from the update itself.
HAND_MADE = ApiSpec("hand-made EMA update", Role.EMA_MODEL)
_HAND_DECAY = Weight("decay", Side.OLD)
_HAND_WEIGHT = Weight("weight", Side.NEW)  # the weight on the live tensor (``lerp_``'s)


def hand_weight(side: Side) -> Weight:
    """The weight of a hand-written update that weighs ``side`` by its value."""
    return _HAND_DECAY if side is Side.OLD else _HAND_WEIGHT


# Words in a coefficient's name that say what the average is for, when the object's own
# names do not: an RL target network's rate, a teacher's momentum.


@dataclass(eq=False)
class DecaySetting:
    """One configured averaging weight."""

    bound: BoundCall  # the call (or mapping) carrying the weight
    spec: ApiSpec  # the spec defining the weight's semantics
    weight: Weight
    expr: cst.BaseExpression | None  # the argument as written (None: left at its default)
    value: Value | None  # its resolved value (None: unknown, or left at the default)
    given: float | None  # the number in the argument's own semantics
    decay: float | None  # converted to D, the weight on the old average
    ramp: Ramp | None  # the warmup that applies: the value is a ceiling
    ramp_unknown: bool  # whether a warmup applies cannot be told statically
    interval: int  # update interval in steps (spec argument x guard around updates)
    interval_expr: cst.BaseExpression | None  # the interval argument, if given
    interval_from_guard: bool  # part of the interval comes from an ``if i % k == 0``
    obj: AveragingObject | None
    use: Use
    # The part of ``interval`` that the library applies itself (its counter still counts
    # every call, which matters for its warmup).
    spec_interval: int = 1
    resolver: ValueResolver | None = field(default=None, repr=False)
    # The hand-written update the setting is read from (None for an API's argument).
    update: InPlaceUpdate | None = None
    # Whether editing the value where it is written keeps the update consistent (both of a
    # hand-written update's coefficients spell the same value); always True for APIs.
    editable: bool = True
    # When the two coefficients of a hand-written update are spelled apart (``0.9 * e +
    # 0.1 * p``): the other one, and the side it weighs. A fix must change both.
    partner: tuple[cst.BaseExpression, Side] | None = None
    # The setting is the default of the weight parameter of an averaging class or update
    # function the module defines (``def __init__(self, model, decay=0.9999)``): judged
    # where it is written, for every caller that leaves it.
    definition: bool = False
    # A definition's default that no call of the module uses (a helper whose callers are
    # elsewhere, or pass their own value): only a value that cannot be meant is judged.
    unused_default: bool = False
    # Where a finding on the value goes: the literal when it is such a default (the use
    # resolves to it), else the argument as written.
    site: cst.BaseExpression | None = None
    # The value is written here and used in another module (``update_ema() in
    # engine.py:82``): the setting is judged at the call that hands it over.
    forwarded: str | None = None
    # The call that uses a value written in another call (an ``ema_update(..., d)`` whose
    # ``d`` is ``sched.get_value()`` of a warmup schedule): a related location.
    used_by: cst.CSTNode | None = None
    # ``ema = optax.incremental_update(ema, params, w)``: the average passed as the new
    # tensors, so the weight is on the average (the side is then ``Side.OLD``). Swapped
    # trees with a momentum-style value are EMA302's; with a decay, the two swaps cancel.
    trees_swapped: bool = False
    # A weight that is a half-life in samples (EDM2 ``TraditionalEMA(halflife_Mimg=...)``):
    # the batch size its updates pass, from which ``decay`` is computed (None: unknown).
    batch: float | None = None

    @property
    def half_life(self) -> bool:
        """The weight is a half-life in samples, not a decay or a momentum: ``given`` is
        that half-life, ``decay`` the per-update decay at the batch size (when known)."""
        return self.weight.per_samples is not None

    @property
    def hand_made(self) -> bool:
        """The weight is read from a hand-written update of this module (whose arithmetic
        EMA302 judges); a value handed to one in another module is judged like an API's."""
        return self.update is not None

    @property
    def read_from_update(self) -> bool:
        """The update's arithmetic says which side the value weighs, so a value on the
        wrong side is the update's error (EMA302's): a hand-written update of this module,
        or one in another module that weighs the live weights by the value handed to it
        (``mul_(1 - rate).add_(src, alpha=rate)`` given ``args.ema_rate``)."""
        if self.hand_made:
            return True
        return (
            self.forwarded is not None and self.spec is HAND_MADE and self.weight.side is Side.NEW
        )

    @property
    def named_momentum(self) -> bool:
        """A hand-written update's or a definition's weight that is named a momentum and
        weighs the new value in the code's own arithmetic (mmengine's ``lerp_(p,
        self.momentum)``, ``mul_(1 - momentum).add_(p, alpha=momentum)``): the name and the
        update agree, so a value near one is the value's error, not the update's."""
        if self.weight.side is not Side.NEW:
            return False
        if self.definition:
            name = self.weight.param
        elif self.hand_made and isinstance(self.expr, (cst.Name, cst.Attribute)):
            name = _code(self.expr)
        else:
            return False
        return "momentum" in tokens(name)

    @property
    def node(self) -> cst.BaseExpression | None:
        """Where a finding on the value is reported."""
        return self.site if self.site is not None else self.expr

    @property
    def is_default(self) -> bool:
        """The weight and the interval are the library's own defaults."""
        if self.definition or self.spec.in_project or not self.spec.recipe_defaults:
            # The default is the value written here, for its own callers; a project
            # helper's default is the project's choice, and so is a call that repeats it.
            return False
        weight_default = self.expr is None or (
            self.given is not None
            and self.weight.default is not None
            and math.isclose(self.given, self.weight.default, rel_tol=0, abs_tol=1e-12)
        )
        interval_default = not self.interval_from_guard and (
            self.spec.interval is None or self.interval == self.spec.interval.default
        )
        return weight_default and interval_default

    @property
    def step_decay(self) -> float | None:
        """The per-optimizer-step decay: D^(1/interval)."""
        if self.decay is None or not 0.0 < self.decay < 1.0:
            return self.decay
        return self.decay ** (1.0 / self.interval)

    def decay_after(self, updates: float) -> float | None:
        """D after ``updates`` updates: the ramp's value, or the flat decay."""
        if self.decay is None:
            return None
        if self.ramp is None:
            return self.decay
        gamma = self._ramp_parameter(self.ramp.gamma)
        power = self._ramp_parameter(self.ramp.power)
        if gamma is None or power is None or gamma <= 0:
            return None
        try:
            return self.ramp.decay_at(self.decay, updates, gamma, power)
        except (ArithmeticError, ValueError):
            return None

    def _ramp_parameter(self, parameter: tuple[str, float]) -> float | None:
        name, default = parameter
        if not name:
            return default
        expr = self.bound.value(name)
        if expr is None:
            return default if self.bound.is_default(name) else None
        return self.resolver.number(expr) if self.resolver is not None else None


class DecaySettings:
    """The averaging weights configured in a module, in document order."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.resolver = ctx.get(ValueResolver)
        self.settings: list[DecaySetting] = []
        # Weights whose value this module's callers in other modules give (for its summary).
        self.forwarded: list[ForwardedWeight] = []
        self._by_bound: dict[int, DecaySetting] = {}
        bound_calls = ctx.get(BoundCalls).calls
        objects = ctx.get(AveragingObjects) if bound_calls else None
        for bound in bound_calls:
            setting = self._setting(bound, objects)
            if setting is not None:
                self.settings.append(setting)
                self._by_bound[id(bound.call)] = setting
        self.settings.extend(self._hand_made_settings())
        self._add_forwarded_settings()
        self._add_definitions()
        self._add_local_leaf_helpers(objects)
        self._add_config_settings()
        self._forward_config_reads()

    @classmethod
    def build(cls, ctx: FileContext) -> DecaySettings:
        return cls(ctx)

    def for_call(self, node: cst.CSTNode) -> DecaySetting | None:
        return self._by_bound.get(id(node))

    def run_length(self, setting: DecaySetting) -> RunLength | None:
        """The run length the object of ``setting`` is updated over, when known."""
        lengths = self.ctx.get(RunLengths)
        obj = setting.obj
        updates = list(obj.updates) if obj is not None else []
        if setting.update is not None:
            # Counted from the loop around the update's loop over tensors, not from it.
            update = setting.update
            updates = [update.loop if update.loop is not None else update.node]
        creation = obj.creation if obj is not None else setting.bound.call
        return lengths.for_updates(updates, creation)

    def placement(
        self, setting: DecaySetting, fallback: cst.BaseExpression | None = None
    ) -> tuple[cst.BaseExpression | None, tuple[tuple[cst.CSTNode, str], ...]]:
        """Where a finding on ``setting``'s value goes, and the use it rests on.

        The value is reported where its literal is written when that is another statement
        of this module (the argparse default, the constant, the config entry), so the fix
        and the reader land in one place; the call that uses it is the related location.
        Otherwise (the literal is at the call, or not in this module) at the use."""
        node = setting.node if setting.node is not None else fallback
        index = self.ctx.index
        if setting.forwarded is not None:
            # Written here (the literal), used in the module it is handed to.
            call = setting.bound.call
            return node, ((call, f"used by {setting.forwarded}: {_short(call)}"),)
        if node is not None and setting.used_by is not None:
            return node, ((setting.used_by, f"used here: {_short(setting.used_by)}"),)
        if node is not None and (setting.definition or setting.site is not None):
            return node, self._default_users(setting, node)
        if node is None:
            return node, ()
        # The literal, or the one a computed value comes from (``1 - x``, ``1.0 - DECAY``).
        literal = setting.value.written if setting.value is not None else None
        if literal is None or literal is node or index.order_of(literal) is None:
            return node, ()
        if index.contains(node, literal):
            return node, ()  # written in the expression itself (``decay=1 - 0.0001``)
        use = index.statement(node)
        if use is None or index.statement(literal) is use:
            return node, ()
        if isinstance(use, cst.SimpleStatementLine) and len(use.body) == 1:
            use_node: cst.CSTNode = use.body[0]
        else:
            use_node = node
        return literal, ((node, f"used here: {_short(use_node)}"),)

    def _default_users(
        self, setting: DecaySetting, default: cst.BaseExpression
    ) -> tuple[tuple[cst.CSTNode, str], ...]:
        """Where a parameter's default that a finding is reported on is used: the module's
        calls that leave it (``update_ema(ema, model)`` in the loop), at most three; else
        the update that reads it, when that is another statement."""
        index = self.ctx.index
        param = index.parent(default)
        function = index.enclosing(param, cst.FunctionDef) if param is not None else None
        found: list[tuple[cst.CSTNode, str]] = []
        if isinstance(param, cst.Param) and isinstance(function, cst.FunctionDef):
            name = param.name.value
            for call in self.resolver.callers(function):
                if _argument_for_default(self.resolver, function, param, call):
                    found.append((call, f"leaves {name} at its default: {_short(call)}"))
        if found:
            return tuple(found[:3])
        use = setting.expr
        if use is None or use is default or index.order_of(use) is None:
            return ()
        statement = index.statement(use)
        if statement is None or statement is index.statement(default):
            return ()
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            return ((use, f"used here: {_short(statement.body[0])}"),)
        return ((use, f"used here: {_short(use)}"),)

    # Building ----------------------------------------------------------------------------------
    def _setting(self, bound: BoundCall, objects: AveragingObjects | None) -> DecaySetting | None:
        spec = bound.averaging
        weight = spec.weight
        if weight is None or spec.role is Role.EMA_SCHEDULE:
            return None  # a schedule is judged where an update takes its value
        if weight.enabled_when is not None and not self._condition(bound, *weight.enabled_when):
            return None  # the averaging is off (Keras without use_ema=True)
        obj = objects.for_call(bound.call) if objects is not None else None
        if obj is None and spec.role is Role.EMA_AVG_FN:
            return None
        if obj is not None and objects is not None and objects.names_only(obj):
            return None  # it averages nothing: its weight is moot
        use = obj.use if obj is not None else Use.EVAL
        if spec.role is Role.GRADIENT_EMA:
            use = Use.NOT_WEIGHTS
        trees_swapped = swapped_trees(self.ctx, bound) is not None
        if trees_swapped:
            # The result is the tree passed as the new tensors: the weight is the average's.
            weight = replace(weight, side=Side.OLD if weight.side is Side.NEW else Side.NEW)
        expr = bound.value(weight.param)
        value: Value | None = None
        given: float | None = None
        if expr is not None:
            value = self.resolver.resolve(expr)
            given = value.number if value is not None else None
            schedule = self._schedule_of(expr) if value is None and not trees_swapped else None
            if schedule is not None:
                return self._scheduled(bound, schedule, obj, use)
        elif bound.is_default(weight.param) and weight.default is not None:
            given = weight.default
        decay = None
        batch: float | None = None
        if weight.per_samples is not None:
            # A half-life in samples: a decay once the batch size is known.
            batch = self._batch_size(obj, weight)
            if given is not None and batch is not None and given > 0:
                decay = 0.5 ** (batch / (given * weight.per_samples))
            if value is not None:
                value = replace(value, form="half-life-samples")
        elif given is not None:
            decay = given if weight.side is Side.OLD else 1.0 - given
        if decay == 0.0 and spec.role is Role.EMA_FUNCTION and expr is not None:
            return None  # ``update_ema(ema, model, decay=0)``: a sync that copies, no average
        ramp, ramp_unknown = self._ramp(bound, weight)
        interval, interval_expr, from_guard, spec_interval = self._interval(bound, obj)
        if expr is not None and value is None and not bound.virtual:
            name = spec.short_name + "()"
            self._forward(expr, spec, weight, use, interval, ramp, ramp_unknown, bound.call, name)
        setting = DecaySetting(
            bound,
            spec,
            weight,
            expr,
            value,
            given,
            decay,
            ramp,
            ramp_unknown,
            interval,
            interval_expr,
            from_guard,
            obj,
            use,
            spec_interval,
            self.resolver,
            trees_swapped=trees_swapped,
            batch=batch,
        )
        if value is not None and self._is_parameter_default(value.origin, bound.call):
            # ``def setup_ema(self, decay=0.9999): ModelEmaV3(m, decay=decay)``: the value is
            # judged at its use and reported where it is written, the default.
            setting.site = value.origin
        return setting

    def _batch_size(self, obj: AveragingObject | None, weight: Weight) -> float | None:
        """The batch size every update call of ``obj`` passes (EDM2's ``ema.update(cur_nimg,
        batch_size)``), as a number; None when a call leaves it out or the calls differ."""
        if obj is None or obj.spec is None:
            return None
        keyword, position = weight.batch_arg
        found: set[float] = set()
        for call in obj.updates:
            if not (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in obj.spec.update_methods
            ):
                continue
            if any(a.star for a in call.args):
                return None
            arg = next((a for a in call.args if a.keyword and a.keyword.value == keyword), None)
            positional = [a for a in call.args if a.keyword is None]
            if arg is None and len(positional) > position:
                arg = positional[position]
            number = self.resolver.number(arg.value) if arg is not None else None
            if number is None or number <= 0:
                return None
            found.add(number)
        return found.pop() if len(found) == 1 else None

    def _schedule_of(self, expr: cst.BaseExpression) -> BoundCall | None:
        """The warmup schedule whose current value ``expr`` is: ``sched.get_value()``,
        directly or through a name (or ``self.x``) assigned it once, of a ``sched`` made by
        a schedule API of the table (k-diffusion ``EMAWarmup``)."""
        node: cst.BaseExpression | None = expr
        if isinstance(node, (cst.Name, cst.Attribute)):
            node = self.resolver.assigned_value(node)
        if not (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and not node.args
            and isinstance(node.func.value, (cst.Name, cst.Attribute))
        ):
            return None
        maker = self.resolver.assigned_value(node.func.value)
        if maker is None:
            return None
        schedule = self.ctx.get(BoundCalls).bound(maker)
        if (
            schedule is None
            or schedule.spec.role is not Role.EMA_SCHEDULE
            or node.func.attr.value not in schedule.spec.value_methods
        ):
            return None
        return schedule

    def _scheduled(
        self,
        bound: BoundCall,
        schedule: BoundCall,
        obj: AveragingObject | None,
        use: Use,
    ) -> DecaySetting | None:
        """The setting of an update given a warmup schedule's value: the schedule's ceiling
        (``max_value``), judged with the update's object, use and interval, and reported
        where the ceiling is written with the update as the related location. A ceiling of
        one (k-diffusion's default) leaves the ramp itself as the horizon: not judged."""
        weight = schedule.spec.weight
        assert weight is not None
        expr = schedule.value(weight.param)
        value: Value | None = None
        given: float | None = None
        if expr is not None:
            value = self.resolver.resolve(expr)
            given = value.number if value is not None else None
        elif schedule.is_default(weight.param):
            given = weight.default
        if given is None or given >= 1.0:
            return None
        decay = given if weight.side is Side.OLD else 1.0 - given
        ramp, ramp_unknown = self._ramp(schedule, weight)
        interval, interval_expr, from_guard, spec_interval = self._interval(bound, obj)
        return DecaySetting(
            schedule,
            schedule.spec,
            weight,
            expr,
            value,
            given,
            decay,
            ramp,
            ramp_unknown,
            interval,
            interval_expr,
            from_guard,
            obj,
            use,
            spec_interval,
            self.resolver,
            used_by=bound.call,
        )

    def _is_parameter_default(self, origin: cst.BaseExpression | None, use: cst.CSTNode) -> bool:
        if origin is None or self.ctx.index.contains(use, origin):
            return False
        parent = self.ctx.index.parent(origin)
        return isinstance(parent, cst.Param) and parent.default is origin

    def _condition(self, bound: BoundCall, param: str, wanted: object) -> bool | None:
        expr = bound.value(param)
        if expr is None:
            if not bound.is_default(param):
                return None
            default = bound.averaging.default(param)
            if default == REQUIRED:
                return None
            return (default is not None) if wanted == NOT_NONE else default == wanted
        value = self.resolver.resolve(expr)
        if wanted == NOT_NONE:
            if isinstance(expr, cst.Name) and expr.value == "None":
                return False
            return True if value is None else value.value is not None
        if value is None:
            return None
        return value.value == wanted

    def _ramp(self, bound: BoundCall, weight: Weight) -> tuple[Ramp | None, bool]:
        for ramp in weight.ramps:
            if ramp.when is None:
                return ramp, False
            holds = self._condition(bound, *ramp.when)
            if holds is None:
                return None, True
            if holds:
                return ramp, False
        return None, False

    def _interval(
        self, bound: BoundCall, obj: AveragingObject | None
    ) -> tuple[int, cst.BaseExpression | None, bool, int]:
        interval = 1
        expr: cst.BaseExpression | None = None
        specs = [bound.averaging]
        if obj is not None and obj.spec is not None and obj.spec is not bound.averaging:
            specs.append(obj.spec)
        owner = obj.bound if obj is not None and obj.bound is not None else bound
        for spec in specs:
            if spec.interval is None:
                continue
            arg = owner.value(spec.interval.param) or bound.value(spec.interval.param)
            if arg is None:
                interval *= spec.interval.default
                continue
            number = self.resolver.number(arg)
            if number is None or number < 1:
                return 1, arg, False, 1
            interval *= int(number)
            expr = arg
        spec_interval = interval
        from_guard = False
        if obj is not None and obj.updates:
            lengths = self.ctx.get(RunLengths)
            guards = {lengths.guard_interval(u)[0] for u in obj.updates}
            if len(guards) == 1:
                guard = guards.pop()
                if guard > 1 and not self._steps_under_same_guard(obj, lengths):
                    interval *= guard
                    from_guard = True
        return interval, expr, from_guard, spec_interval

    def _steps_under_same_guard(self, obj: AveragingObject, lengths: RunLengths) -> bool:
        """The guard around the update also holds the optimizer step (accumulation)."""
        from ema_lint.analysis.training.loops import TrainingLoops

        loops = self.ctx.get(TrainingLoops)
        for update in obj.updates:
            _, guard = lengths.guard_interval(update)
            if guard is None:
                continue
            for call in self.ctx.index.descendants(guard, cst.Call):
                if isinstance(call, cst.Call) and loops.steps(call):
                    return True
        return False

    # Defaults of the module's own averaging classes and helpers -------------------------------
    def _add_definitions(self) -> None:
        """Settings for the weight defaults of the averaging classes and update functions the
        module defines (recognised by structure, as the project model records them). A use
        that resolves to such a default is reported at the default instead, once."""
        project = self.ctx.project
        definitions = getattr(project, "definitions", None) if project is not None else None
        if definitions is None:
            return
        found = definitions()
        if not found:
            return
        by_origin: dict[int, DecaySetting] = {}
        for setting in self.settings:
            origin = setting.value.origin if setting.value is not None else None
            if origin is not None:
                by_origin.setdefault(id(origin), setting)
        added: list[DecaySetting] = []
        for spec, function in found:
            weight = spec.weight
            assert weight is not None
            if spec.elementwise and not self._leaf_helper_on_weights(function):
                continue  # ``smooth(loss_ema, loss, beta=0.9)``: what it averages is unknown
            param = next((p for p in all_params(function) if p.name.value == weight.param), None)
            if param is None or param.default is None:
                continue
            used = by_origin.get(id(param.default))
            if used is not None and used.hand_made and _momentum_weight(weight):
                # ``lerp_(p, self.momentum)`` reading the class's ``momentum`` default: the
                # value is judged in the class's terms (its name and side), where it is written.
                setting = self._definition_setting(spec, function, param)
                if setting is not None:
                    self.settings.remove(used)
                    added.append(setting)
                    continue
            if used is not None:
                used.site = param.default  # judged at its use, reported where it is written
                if used.hand_made and used.obj is not None and used.obj.helper is function:
                    # The update of a helper's parameter read its default: no call is known.
                    used.unused_default = self._unused_default(function, param)
                continue
            setting = self._definition_setting(spec, function, param)
            if setting is not None:
                setting.unused_default = self._unused_default(function, param)
                added.append(setting)
        if added:
            self.settings.extend(added)
            order = self.ctx.index.order
            self.settings.sort(key=lambda s: order.get(id(s.node or s.bound.call), 0))

    def _add_local_leaf_helpers(self, objects: AveragingObjects | None) -> None:
        """Calls of the module's own leaf-wise helpers (``def ema(e, p, d): return e * d +
        p * (1 - d)``) in what a tree map applies to averaged weights: each passes the decay,
        judged like an imported helper's (the helper's own code is read as its summary)."""
        project = self.ctx.project
        definitions = getattr(project, "definitions", None) if project is not None else None
        if definitions is None or not self.ctx.nodes(cst.Lambda):
            return
        local = {spec.qualname: spec for spec, _ in definitions() if spec.elementwise}
        if not local:
            return
        updates = self.ctx.get(InPlaceUpdates)
        added = False
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if not isinstance(func, cst.Name) or func.value not in local:
                continue
            if id(call) in self._by_bound or not updates.applied_to_weights(call):
                continue
            setting = self._setting(bind_arguments(local[func.value], call, func.value), objects)
            if setting is not None:
                self.settings.append(setting)
                self._by_bound[id(call)] = setting
                added = True
        if added:
            order = self.ctx.index.order
            self.settings.sort(key=lambda s: order.get(id(s.node or s.bound.call), 0))

    def _leaf_helper_on_weights(self, function: cst.FunctionDef) -> bool:
        """A call of the leaf-wise helper ``function`` that a tree map applies to weights."""
        updates = self.ctx.get(InPlaceUpdates)
        name = function.name.value
        return any(
            isinstance(call.func, cst.Name)
            and call.func.value == name
            and updates.applied_to_weights(call)
            for call in self.ctx.nodes(cst.Call)
        )

    def _unused_default(self, function: cst.FunctionDef, param: cst.Param) -> bool:
        """A class is made elsewhere; a helper's default is judged at the calls that leave
        it. A default no call here leaves (guided-diffusion's ``rate=0.99``, always passed by
        its callers) is moot for this module's runs: only a value no run can mean (a frozen
        or diverging average) is judged. A helper no module of the project calls (a
        library's public API) is judged: its every user gets the default."""
        owner = self.ctx.index.enclosing(function, cst.ClassDef)
        return (
            owner is None
            and not self.resolver.callers(function)
            and self._called_elsewhere(function)
        ) or self._always_passed(function, param)

    def _called_elsewhere(self, function: cst.FunctionDef) -> bool:
        """Another module of the project may call ``function`` (with its own value): True
        when the project cannot tell (no project model)."""
        project = self.ctx.project
        if project is None:
            return True
        return project.mentioned_elsewhere(function.name.value)

    def _always_passed(self, function: cst.FunctionDef, param: cst.Param) -> bool:
        callers = self.resolver.callers(function)
        return bool(callers) and all(
            self.resolver.argument_for(function, param, call) is not None for call in callers
        )

    def _definition_setting(
        self, spec: ApiSpec, function: cst.FunctionDef, param: cst.Param
    ) -> DecaySetting | None:
        weight = spec.weight
        assert weight is not None and param.default is not None
        value = self.resolver.resolve(param.default)
        given = value.number if value is not None else None
        if value is None or given is None:
            return None
        decay = given if weight.side is Side.OLD else 1.0 - given
        bound = BoundCall(
            spec, param, spec.qualname, {weight.param: cst.Arg(param.default)}, virtual=True
        )
        ramp, ramp_unknown = self._ramp(bound, weight)
        use = self._definition_use(function, weight.param)
        if use is None:
            return None
        return DecaySetting(
            bound,
            spec,
            weight,
            param.default,
            value,
            given,
            decay,
            ramp,
            ramp_unknown,
            1,
            None,
            False,
            None,
            use,
            1,
            self.resolver,
            definition=True,
        )

    def _definition_use(self, function: cst.FunctionDef, weight: str) -> Use | None:
        """What the class or helper averages for: the use of the averaged copies it holds,
        else what its names say (a teacher, an RL target's ``tau``); None when the weight is
        reassigned in the class (a schedule)."""
        owner = self.ctx.index.enclosing(function, cst.ClassDef)
        scope: cst.CSTNode = owner if isinstance(owner, cst.ClassDef) else function
        objects = self.ctx.get(AveragingObjects)
        for obj in objects.objects:
            if obj.module_copy and self.ctx.index.contains(scope, obj.creation):
                if obj.weight_reassigned:
                    return None
                if obj.use is not Use.EVAL:
                    return obj.use
        words = [weight, function.name.value, getattr(owner, "name", function.name).value]
        # ``teacher``, ``target_net``; not another parameter whose default is above one: a
        # horizon (ultralytics' ramp ``tau=2000``, a half-life), never a polyak rate.
        words += [p.name.value for p in all_params(function) if not _horizon_param(p)]
        return named_use(Use.EVAL, " ".join(words))

    # Hand-written updates ----------------------------------------------------------------------
    def _hand_made_settings(self) -> list[DecaySetting]:
        objects = self.ctx.get(AveragingObjects)
        # ``AveragedModel(model, avg_fn=lambda a, m, n: d * a + (1 - d) * m)``: an API object
        # whose decay is written by hand, judged as a hand-written update.
        hand = [
            o
            for o in objects.objects
            if o.inplace and (o.hand_made or any(u.form == "avg_fn" for u in o.inplace))
        ]
        if not hand:
            return []
        updates = self.ctx.get(InPlaceUpdates)
        found: list[DecaySetting] = []
        for obj in hand:
            for update in obj.inplace:
                if update.away or updates.discarded(update) is not None:
                    continue  # a sign slip or a result thrown away: EMA302's and EMA301's
                if not objects.averages_weights(update):
                    continue
                setting = self._hand_setting(update, obj)
                if setting is not None:
                    found.append(setting)
                    continue
                per_call = self._per_call_settings(update, obj)
                if per_call:
                    found.extend(per_call)
                else:
                    self._forward_hand(update, obj)
        found.sort(key=lambda s: self.ctx.index.order[id(s.bound.call)])
        return found

    def _hand_setting(self, update: InPlaceUpdate, obj: AveragingObject) -> DecaySetting | None:
        """The decay of one hand-written update, when its coefficients say it unambiguously."""
        old, new = update.old_weight, update.new_weight
        if old is None or new is None:
            return None
        old_value = self._coefficient(old)
        new_value = self._coefficient(new)
        if old_value is None or new_value is None:
            return None
        if not math.isclose(old_value + new_value, 1.0, rel_tol=0, abs_tol=1e-9):
            return None  # not a convex combination: EMA302 judges the pair
        # The expression that carries the value: ``d`` in ``mul_(d)`` / ``1 - d``, ``w`` in
        # ``lerp_(p, w)``; in the update's own statement (not the ``mul_`` before it).
        old_leaf, old_side = _carrier(old, Side.OLD)
        new_leaf, new_side = _carrier(new, Side.NEW)
        # One value spelled once (``d`` and ``1 - d``): editing it keeps the pair summing to
        # one; two literals (``0.9`` and ``1 - 0.9``) must be edited together.
        same = old_leaf is new_leaf or (
            _code(old_leaf) == _code(new_leaf) and not _is_number(old_leaf)
        )
        if self.ctx.index.contains(update.node, old_leaf):
            leaf, side = old_leaf, old_side
        elif self.ctx.index.contains(update.node, new_leaf):
            leaf, side = new_leaf, new_side
        else:
            return None
        value = self.resolver.resolve(leaf)
        given = value.number if value is not None else None
        if value is None or given is None:
            return None
        decay = given if side is Side.OLD else 1.0 - given
        if not math.isclose(decay, old_value, rel_tol=0, abs_tol=1e-9):
            return None
        use = self._hand_use(obj, _code(leaf))
        interval = self._hand_interval(update)
        if interval is None:
            return None  # updated under guards that differ between its callers: unsure
        setting = self._hand_made(
            update,
            obj,
            side,
            leaf,
            value,
            given,
            decay,
            interval,
            use,
            editable=same,
            partner=None
            if same
            else ((new_leaf, new_side) if leaf is old_leaf else (old_leaf, old_side)),
        )
        if same and self._is_parameter_default(value.origin, update.node):
            setting.site = value.origin  # reported where it is written, as for an API's
        return setting

    def _per_call_settings(self, update: InPlaceUpdate, obj: AveragingObject) -> list[DecaySetting]:
        """One setting per call of the function holding ``update`` when its decay is that
        function's parameter and the calls pass different values (a pre-training and a
        fine-tuning loop sharing ``ema_update(ema, model, decay)``): each value is judged,
        and fixed, at the call that passes it. A value that makes the update a copy (a
        decay of 0: the initial sync) is not a setting."""
        old, new = update.old_weight, update.new_weight
        if old is None or new is None:
            return []
        old_leaf, old_side = _carrier(old, Side.OLD)
        new_leaf, new_side = _carrier(new, Side.NEW)
        # Both coefficients spell one parameter (``d`` and ``1 - d``): they sum to one for
        # every value a call passes.
        if not (
            isinstance(old_leaf, cst.Name)
            and isinstance(new_leaf, cst.Name)
            and old_leaf.value == new_leaf.value
            and old_side is new_side
        ):
            return []
        bindings = self.resolver.bindings_of(old_leaf) or []
        if len(bindings) != 1 or bindings[0].kind != "param":
            return []
        function, param = bindings[0].function, bindings[0].param
        if not isinstance(function, cst.FunctionDef) or param is None:
            return []
        interval = self._hand_interval(update)
        if interval is None:
            return []
        use = self._hand_use(obj, old_leaf.value)
        objects = self.ctx.get(AveragingObjects)
        found: list[DecaySetting] = []
        for call, arg in self.resolver.arguments_for(function, param):
            if not isinstance(arg, cst.BaseExpression):
                continue  # left at the default (judged where it is written) or unknown
            if (
                not _self_call_of_own_copy(call, obj)
                and not self._constructs_owner(call, update)
                and not any(objects.passed_weights(a.value) is not None for a in call.args)
            ):
                continue  # the same arithmetic into a model no caller averages (a merge)
            value = self.resolver.resolve(arg)
            given = value.number if value is not None else None
            if value is None:
                # ``update_ema(..., rate=args.ema_rate)`` in ``train_one_epoch(..., args)``:
                # the caller in another module tells.
                weight = hand_weight(old_side)
                name = function.name.value + "()"
                self._forward(arg, HAND_MADE, weight, use, interval, None, False, call, name)
                continue
            if given is None:
                continue
            if given == 0.0:
                continue  # the author's initial sync (``ema_update(ema, model, 0)``)
            decay = given if old_side is Side.OLD else 1.0 - given
            if decay == 0.0:
                continue  # a copy of the weights, not an average
            found.append(
                self._hand_made(update, obj, old_side, arg, value, given, decay, interval, use)
            )
        return found

    def _constructs_owner(self, call: cst.Call, update: InPlaceUpdate) -> bool:
        """``call`` makes the ``AveragedModel`` subclass whose ``__init__`` hands the
        update to ``super().__init__`` as its ``avg_fn``: the construction is the average."""
        if update.owner is None:
            return False
        cls = self.ctx.index.enclosing(update.owner, cst.ClassDef)
        name = dotted_name(call.func) or ""
        return isinstance(cls, cst.ClassDef) and name.rsplit(".", 1)[-1] == cls.name.value

    def _hand_made(
        self,
        update: InPlaceUpdate,
        obj: AveragingObject,
        side: Side,
        leaf: cst.BaseExpression,
        value: Value,
        given: float,
        decay: float,
        interval: int,
        use: Use,
        editable: bool = True,
        partner: tuple[cst.BaseExpression, Side] | None = None,
    ) -> DecaySetting:
        """The setting of a hand-written update whose value ``leaf`` weighs ``side``."""
        bound = BoundCall(HAND_MADE, update.node, HAND_MADE.qualname, virtual=True)
        return DecaySetting(
            bound,
            HAND_MADE,
            _HAND_DECAY if side is Side.OLD else _HAND_WEIGHT,
            leaf,
            value,
            given,
            decay,
            None,
            False,
            interval,
            None,
            interval > 1,
            obj,
            use,
            1,
            self.resolver,
            update=update,
            editable=editable,
            partner=partner,
        )

    # Weights that cross modules ----------------------------------------------------------------
    def _forward(
        self,
        expr: cst.BaseExpression,
        spec: ApiSpec,
        weight: Weight,
        use: Use,
        interval: int,
        ramp: Ramp | None,
        ramp_unknown: bool,
        use_node: cst.CSTNode,
        used_by: str,
    ) -> None:
        """Record ``expr`` as a weight the callers of its function in other modules give,
        when it is such a parameter (or an attribute of one)."""
        found = forwarding_parameter(self.resolver, self.ctx.index, expr)
        if found is None:
            return
        function, param, attribute, elements = found
        for known in self.forwarded:
            if known.use_node is use_node and (known.function, known.param, known.attribute) == (
                function,
                param,
                attribute,
            ):
                return  # the same update reached through two of its objects
        self.forwarded.append(
            ForwardedWeight(
                function,
                param,
                attribute,
                spec,
                weight,
                use,
                interval,
                ramp,
                ramp_unknown,
                use_node,
                used_by,
                elements,
            )
        )

    def _forward_hand(self, update: InPlaceUpdate, obj: AveragingObject) -> None:
        """``e.mul_(args.decay).add_(p, alpha=1 - args.decay)`` in ``train(args)``: both
        coefficients spell one value that only the callers of ``train`` elsewhere give."""
        old, new = update.old_weight, update.new_weight
        if old is None or new is None:
            return
        old_leaf, old_side = _carrier(old, Side.OLD)
        new_leaf, new_side = _carrier(new, Side.NEW)
        if old_side is not new_side or _code(old_leaf) != _code(new_leaf):
            return
        interval = self._hand_interval(update)
        if interval is None:
            return
        use = self._hand_use(obj, _code(old_leaf))
        weight = hand_weight(old_side)
        name = "the hand-written EMA update"
        self._forward(old_leaf, HAND_MADE, weight, use, interval, None, False, update.node, name)

    def _forward_config_reads(self) -> None:
        """Weights read as ``self.config.<key>`` in a method of a top-level class, for the
        summary: a module whose experiment class derives from this one sets the key in its
        own ``get_config()`` (jaxline / ml_collections experiments), judged there."""
        for setting in list(self.settings):
            if setting.forwarded is not None or setting.definition:
                continue
            found = self.resolver.config_key(setting.expr)
            if found is None or setting.expr is None:
                continue
            function = self.ctx.index.enclosing(setting.expr, cst.FunctionDef)
            if function is None:
                continue
            use_node = setting.bound.call
            if any(k.use_node is use_node for k in self.forwarded if k.config):
                continue
            name = setting.spec.short_name + "()"
            self.forwarded.append(
                ForwardedWeight(
                    function,
                    "config",
                    found[1],
                    setting.spec,
                    setting.weight,
                    setting.use,
                    setting.interval,
                    setting.ramp,
                    setting.ramp_unknown,
                    use_node,
                    name,
                    config=True,
                )
            )

    def _add_config_settings(self) -> None:
        """Settings for the keys this module's ``get_config()`` sets that a method of the
        base class of its experiment, in another module, reads as an averaging weight
        (``self.config.ema_decay``): judged and reported where this module writes them."""
        project = self.ctx.project
        finder = getattr(project, "config_weights", None) if project is not None else None
        if finder is None or not self.ctx.index.functions_named("get_config"):
            return
        imports = self.ctx.get(ImportTable)
        index = self.ctx.index
        added: list[DecaySetting] = []
        for cls in self.ctx.nodes(cst.ClassDef):
            if index.enclosing(cls, cst.ClassDef, cst.FunctionDef) is not None:
                continue
            for base in cls.bases:
                for qualname in imports.qualified_names(base.value)[:1]:
                    for forwarded in finder(qualname):
                        setting = self._config_setting(cls, base, forwarded)
                        if setting is not None:
                            added.append(setting)
        if added:
            self.settings.extend(added)
            order = index.order
            self.settings.sort(key=lambda s: order.get(id(s.node or s.bound.call), 0))

    def _config_setting(
        self, cls: cst.ClassDef, base: cst.Arg, forwarded: ForwardedCall
    ) -> DecaySetting | None:
        if forwarded.attribute is None:
            return None
        value = self.resolver.config_entry(forwarded.attribute)
        where = (
            f"{forwarded.where}, read as self.config.{forwarded.attribute} by "
            f"{cls.name.value}'s base class"
        )
        return self._handed_setting(base, forwarded, value, where)

    def _handed_setting(
        self, use: cst.CSTNode, forwarded: ForwardedCall, value: Value | None, where: str
    ) -> DecaySetting | None:
        """A setting for a value written in this module and used as ``forwarded``'s weight
        in another module (``use`` is what hands it over: a call, a base class), reported
        where the literal is; None when the value is unknown, written elsewhere, or a copy
        (0: an initial sync)."""
        given = value.number if value is not None else None
        if value is None or given is None:
            return None
        origin = value.origin
        if origin is None or self.ctx.index.order_of(origin) is None:
            return None  # not written in this module: no place to report it
        side = forwarded.weight.side
        decay = given if side is Side.OLD else 1.0 - given
        if given == 0.0 or decay == 0.0:
            return None  # a copy of the weights (an initial sync), not an average
        spec, weight = forwarded.spec, forwarded.weight
        bound = BoundCall(spec, use, spec.qualname, {weight.param: cst.Arg(origin)})
        bound.virtual = True
        return DecaySetting(
            bound,
            spec,
            weight,
            origin,
            value,
            given,
            decay,
            forwarded.ramp,
            forwarded.ramp_unknown,
            forwarded.interval,
            None,
            forwarded.interval > 1,
            None,
            forwarded.use,
            1,
            self.resolver,
            forwarded=where,
        )

    def _add_forwarded_settings(self) -> None:
        """Settings for the values this module hands to another module's averaging (an
        argparse default read as ``args.ema_rate`` by an update in an imported
        ``train_one_epoch(..., args)``): judged at the call that hands them over, reported
        where the literal is written, with the use as a related location."""
        project = self.ctx.project
        finder = getattr(project, "forwarded", None) if project is not None else None
        if finder is None:
            return
        index = self.ctx.index
        added: list[DecaySetting] = []
        for call in self.ctx.nodes(cst.Call):
            if not call.args or id(call) in self._by_bound:
                continue  # hands nothing, or calls the project's own averaging API
            for forwarded in finder(call):
                value = passed_value(self.resolver, call, forwarded)
                setting = self._handed_setting(call, forwarded, value, forwarded.where)
                if setting is not None:
                    added.append(setting)
        if added:
            self.settings.extend(added)
            order = index.order
            self.settings.sort(key=lambda s: order.get(id(s.node or s.bound.call), 0))

    def _coefficient(self, coefficient: Coefficient) -> float | None:
        number = self.resolver.number(coefficient.expr)
        if number is None:
            return None
        return 1.0 - number if coefficient.complement else number

    @staticmethod
    def _hand_use(obj: AveragingObject, coefficient: str) -> Use:
        """The object's use, unless the coefficient's name says it is a target network's
        rate (``tau``, ``polyak``) or a teacher's momentum."""
        return named_use(obj.use, coefficient)

    def _hand_interval(self, update: InPlaceUpdate) -> int | None:
        """The number of optimizer steps between two runs of the update: the ``% k == 0``
        guards around it and, for an update in a function, around every call of it (one
        level up); guards that also hold the optimizer step (accumulation) do not count.
        None when the callers disagree."""
        from ema_lint.analysis.training.loops import TrainingLoops

        lengths = self.ctx.get(RunLengths)
        loops = self.ctx.get(TrainingLoops)

        def guard(node: cst.CSTNode) -> int:
            k, inner = lengths.guard_interval(node)
            if k <= 1 or inner is None:
                return 1
            for call in self.ctx.index.descendants(inner, cst.Call):
                if isinstance(call, cst.Call) and loops.steps(call):
                    return 1
            return k

        node = update.loop if update.loop is not None else update.node
        own = guard(node)
        function = self.ctx.index.enclosing(node, cst.FunctionDef)
        if not isinstance(function, cst.FunctionDef):
            return own
        callers = self.resolver.callers(function)
        outer = {guard(call) for call in callers}
        if len(outer) > 1:
            return None
        return own * (outer.pop() if outer else 1)


def describe_value(setting: DecaySetting) -> str:
    """'EMA decay 0.99 (from EMA_DECAY)' / 'EMA momentum 0.9999 (a decay of 0.0001)'."""
    from ema_lint.analysis.objects.horizon import format_count, format_number

    weight = setting.weight
    given = setting.given
    if given is None:
        return f"EMA {weight.param}"
    what = "EMA " + ("decay ceiling" if setting.ramp is not None else weight.param)
    if setting.ramp is not None and weight.param != "decay":
        what = f"EMA {weight.param} (a decay ceiling)"
    if setting.half_life:
        what = f"EMA {weight.param}"
    text = f"{what} {format_number(given)}"
    if setting.half_life and setting.weight.per_samples is not None:
        images = format_count(given * setting.weight.per_samples)
        text += f" (a half-life of {images} samples"
        if setting.decay is not None and setting.batch is not None:
            text += (
                f": a decay of {format_number(round(setting.decay, 8))} per update at batch "
                f"{format_count(setting.batch)}"
            )
        text += ")"
    elif setting.trees_swapped and setting.decay is not None:
        text += (
            f" (a decay of {format_number(setting.decay)}, with the average passed as "
            f"{setting.spec.source})"
        )
    elif weight.side is Side.NEW and setting.decay is not None:
        text += f" (a decay of {format_number(setting.decay)})"
    via = setting.value.via if setting.value is not None else ""
    if via and via != weight.param:
        text += f" (from {via})"
    if setting.expr is None:
        text += " (the library default)"
    return text


def describe_interval(setting: DecaySetting) -> str:
    """'updated every 10 steps (a per-step decay of 0.99999)', or ''."""
    from ema_lint.analysis.objects.horizon import format_number

    if setting.interval <= 1 or setting.step_decay is None:
        return ""
    return (
        f" updated every {setting.interval} steps (a per-step decay of "
        f"{format_number(round(setting.step_decay, 8))})"
    )


def _argument_for_default(
    resolver: ValueResolver, function: cst.FunctionDef, param: cst.Param, call: cst.Call
) -> bool:
    """``call`` certainly leaves ``param`` at its default (no argument, no star)."""
    if any(a.star for a in call.args):
        return False
    return resolver.argument_for(function, param, call) is None


def _carrier(coefficient: Coefficient, side: Side) -> tuple[cst.BaseExpression, Side]:
    """The expression that spells a coefficient's value, and the side it weighs:
    ``1 - d`` on the live tensor is ``d`` on the old average."""
    expr = coefficient.expr
    if coefficient.complement:
        side = Side.NEW if side is Side.OLD else Side.OLD
    while (
        isinstance(expr, cst.BinaryOperation)
        and isinstance(expr.operator, cst.Subtract)
        and isinstance(expr.left, (cst.Integer, cst.Float))
        and literal_number(expr.left) == 1  # 1, 1.0, 0x1, 1_0e-1
    ):
        expr = expr.right
        side = Side.NEW if side is Side.OLD else Side.OLD
    return expr, side


def _self_call_of_own_copy(call: cst.Call, obj: AveragingObject) -> bool:
    """``self._update_momentum_encoder(m)``: a method of the class updating the copy the
    class holds (``self.momentum_encoder``), so every call of it averages that copy."""
    func = call.func
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and any(name.startswith("self.") for name in obj.names)
    )


def _momentum_weight(weight: Weight) -> bool:
    return weight.side is Side.NEW and "momentum" in tokens(weight.param)


def _horizon_param(param: cst.Param) -> bool:
    """A parameter whose literal default is above one (a time constant in updates)."""
    return param.default is not None and is_time_constant(literal_number(param.default))


def _short(node: cst.CSTNode) -> str:
    """The code of ``node`` on one line, at most 80 characters."""
    note = " ".join(_code(node).split())
    return note if len(note) <= 80 else note[:77] + "..."


def _code(node: cst.CSTNode) -> str:
    if isinstance(node, cst.BaseExpression):
        node = node.with_changes(lpar=(), rpar=())
    return cst.Module([]).code_for_node(node)


def _is_number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))
