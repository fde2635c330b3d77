"""EMA302: a hand-written EMA update that weighs the wrong side, or does not average."""

from __future__ import annotations

import math
from dataclasses import dataclass

import libcst as cst

from ..analysis.objects.api_calls import BoundCalls, swapped_trees
from ..analysis.objects.apis import BoundCall, Role, Side
from ..analysis.objects.averaging import AveragingObjects, tokens
from ..analysis.objects.horizon import describe_decay, format_number, horizon
from ..analysis.objects.triggers import FUNCTIONAL_UPDATE_EVIDENCE
from ..analysis.objects.updates import Coefficient, InPlaceUpdate, InPlaceUpdates, strip_tensor
from ..analysis.syntax.params import all_params
from ..analysis.syntax.values import ValueResolver
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule
from .ema103_semantics_swapped import complement_text

# Names that say a value is a decay (the weight on the old average) in hand-written code.
# ``momentum``, ``tau``, ``alpha`` and ``polyak`` mean either side depending on the project.
_DECAY_WORDS = {"decay", "beta"}
# Short names that stand for a decay in averaging code (MoCo's ``m``, ``d = decay(n)``,
# TF's ``mu``); ``tau``, ``alpha`` and ``w`` stay ambiguous.
_SHORT_DECAYS = {"m", "d", "mu"}


@dataclass(frozen=True)
class _Verdict:
    kind: str  # "swapped", "sum", "away"
    message: str
    fix: Fix | None


def _bare(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if node.lpar else node  # type: ignore[attr-defined]


def _complement_of(node: cst.BaseExpression) -> cst.BaseExpression | None:
    """``1 - x`` -> ``x`` (the ``x`` of a literal one minus something)."""
    inner = _bare(node)
    if (
        isinstance(inner, cst.BinaryOperation)
        and isinstance(inner.operator, cst.Subtract)
        and isinstance(inner.left, (cst.Integer, cst.Float))
        and inner.left.value in ("1", "1.0", "1.")
    ):
        return inner.right
    return None


def _lag(decay: float) -> str:
    if horizon(decay) < 2:
        return "is the live weights with a one-step lag, not an average"
    return f"{describe_decay(decay)}: the live weights with a short lag"


def _compound(node: cst.BaseExpression) -> bool:
    return isinstance(
        node, (cst.BinaryOperation, cst.BooleanOperation, cst.IfExp, cst.UnaryOperation)
    )


class CoefficientsSwapped(Rule):
    """
    ## What it finds
    A hand-written update of averaged weights whose coefficients are wrong, judged by which
    operand is the average being updated (the *shadow*) and which the live weights:

    - **swapped**: the coefficient on the shadow is the small one and the one on the live
      weights the large one (``e.mul_(1 - decay).add_(p, alpha=decay)``,
      ``e.copy_(0.001 * e + 0.999 * p)``), where the values resolve (through constants,
      arguments, defaults); or, where they do not, the shadow is weighted by
      ``1 - decay`` (``beta``) and the live weights by the decay; or ``lerp``'s weight is
      a decay (``e.lerp_(p, decay)``, ``torch.lerp(e, p, decay, out=e)``), where it
      belongs to the new value;
    - **not an average**: the two coefficients do not sum to one (``e.mul_(d).add_(p)``,
      whose ``alpha`` defaults to 1, or ``e.mul_(d).add_(p, alpha=d)``);
    - **a sign slip**: the update moves the shadow away from the live weights
      (``e.add_((e - p) * (1 - d))``, ``e.sub_((p - e) * k)``);
    - **the trees swapped** in a functional update: ``ema_params =
      optax.incremental_update(ema_params, params, 1 - decay)`` passes the average as
      ``new_tensors``, and the function returns ``step_size * new_tensors + (1 - step_size) *
      old_tensors``, so the average keeps only ``1 - decay`` of itself (reported when the
      result is bound to the tree passed first and its share is below one half, or written
      ``1 - x``; with the decay as ``step_size`` too the two slips cancel).

    The update is recognised in all its forms: ``mul_``/``add_`` (also as two statements,
    legacy ``add_(1 - d, p)``, ``_foreach_mul_``/``_foreach_add_``), ``lerp_``,
    ``torch.lerp(..., out=e)`` and ``_foreach_lerp_``, ``copy_`` of a combination or a
    ``lerp``, ``.data =``
    assignments, ``e -= (1 - d) * (e - p)``, ``tmp = e - p; tmp.mul_(k); e.sub_(tmp)``;
    in helpers given the two sequences, two tensors or two models (``update_ema(target_params,
    source_params, rate=0.99)``, ``_lerp_(ema_v, model_v, weight)`` with the weight its
    callers pass, ``accumulate(model1, model2, decay)``, flax's ``ema[...] = ...``; a
    helper over two sequences whose parameters say which is the average, ``def
    sync(target, source, k)`` or ``def step(average, current, k)``, whose own name says it
    averages, ``def ema(xs, ys, k)``, or that every call passes an averaged copy's weights
    from inside a loop, ``blend(ema_model.parameters(), model.parameters(), 0.999)``, or,
    whatever the names, a ``deepcopy`` of the model a loop trains and that model once per
    training step, ``step(twin.parameters(), net.parameters(), 0.999)``; a merge after
    training, a ``tau`` interpolation or a loop that trains nothing is not an average),
    helpers that return the average (``return ema_value * d + value * (1 - d)``), the
    running mean's two halves (``e.add_(-k * e)`` then ``e.add_(k * p)``), lists of the
    two models' tensors filled in a loop, and JAX's tree maps
    (``jax.tree.map(lambda e, p: d * e + (1 - d) * p, ema_params, params)``, the difference
    ``lambda e, p: e + (1 - d) * (p - e)``, or a function of the module mapped by name);
    the ``avg_fn`` handed to ``AveragedModel`` (a lambda, a function, or the nested
    function a subclass passes to ``super().__init__``), whose first parameter is the
    average whatever it is called: ``lambda averaged_model_parameter, model_parameter,
    num_averaged: 0.1 * averaged_model_parameter + 0.9 * model_parameter`` keeps a tenth;
    and the in-place updates of a ``multi_avg_fn``, of its second list into its first.
    Where the values do not resolve, a weight named as a decay (``decay``, ``beta``, MoCo's
    ``m``, ``d``, ``mu``) belongs on the average, and so does one the code's own values say
    is a decay; a weight they say is small belongs on the live weights (mmcv's and
    ignite's ``momentum``: ``teacher = (1 - momentum) * teacher + momentum * student`` with
    ``momentum=0.0002``). Those values are, in order: the default of the helper's parameter,
    what its callers pass (a hard copy's 0 or 1 aside), the name's own values, and the
    class's attribute or constructor default of the same name (``momentum =
    getattr(engine.state, name)`` in a class built with ``momentum=0.0002``).
    ``one_minus_decay = 1.0 - decay`` is followed, never read from its name. Judged by
    operand, so EDM's
    ``p_ema.copy_(p_net.detach().lerp(p_ema, beta))`` (the decay on the shadow, written from
    the other side), guided-diffusion's ``mul_(rate).add_(src, alpha=1 - rate)`` and
    mean-teacher's ``mul_(alpha).add_(1 - alpha, param)`` stay silent, as do a hard copy
    (``tau = 1``), an equal mix, and averages of things other than weights (Adam moments,
    VQ codebooks, loss smoothing). The live model pulled toward the average (a lookahead or
    "update the model with the EMA" step) is not an average of the live weights and is
    not judged.

    Which updates are judged: those that average *weights* (read from ``parameters()``,
    ``named_parameters()``, ``state_dict()``, ``buffers()``, or written into an averaging
    API's model) and are named as an average: the shadow, its container, or the function or
    class holding the update says ``ema``, ``shadow``, ``teacher`` or ``polyak`` (also
    ``avg``, ``average`` or ``swa`` for a ``deepcopy`` of the model), or is a
    ``*momentum_update*``, ``soft_update``, ``target_net``... Model merging and
    interpolation, optimizer moments, VQ codebooks and loss smoothing are not judged.

    ## Why it hurts training
    ``e.mul_(1 - decay).add_(p, alpha=decay)`` with decay 0.999 keeps 0.1% of the average and
    takes 99.9% of the live weights at every step: the "EMA" is the live model with a
    one-step lag and brings none of the benefit of averaging. Coefficients that do not sum to
    one make the average grow or shrink geometrically instead of tracking the weights, and
    a sign slip pushes it away from them until it diverges. Training runs in every case; the
    averaged model is just useless.

    ## Example
    ```python
    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay=0.999):
        for e, p in zip(ema_model.parameters(), model.parameters()):
            e.mul_(1 - decay).add_(p, alpha=decay)
    ```

    ## Use instead
    ```python
    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay=0.999):
        for e, p in zip(ema_model.parameters(), model.parameters()):
            e.mul_(decay).add_(p, alpha=1 - decay)
    ```

    ## Fix
    Safe, for a clean swap: the two coefficients are exchanged
    (``e.mul_(1 - decay).add_(p, alpha=decay)`` becomes ``e.mul_(decay).add_(p, alpha=1 -
    decay)``); where one weight stands for both (``lerp``, ``e.sub_((e - p) * k)``) it
    becomes its complement (``e.lerp_(p, decay)`` becomes ``e.lerp_(p, 1 - decay)``). A sign
    slip is fixed by exchanging the operands of the difference, swapped trees by exchanging
    the two arguments. Coefficients that do not sum
    to one have no automatic fix: which one is meant cannot be told.
    """

    code = "EMA302"
    name = "ema-coefficients-swapped"
    summary = "Hand-written EMA update that weighs the wrong side, or does not average"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    # The fix replaces coefficients only, but in the two-statement form (``e.mul_(1 - d)``
    # then ``e.add_(p, alpha=d)``) one of them is in the statement before the finding's.
    fix_scope = FixScope.VALUE
    triggers = FUNCTIONAL_UPDATE_EVIDENCE.triggers
    trigger_groups = FUNCTIONAL_UPDATE_EVIDENCE.groups
    requires = (InPlaceUpdates, AveragingObjects, ValueResolver, BoundCalls)

    def finish(self) -> None:
        self._resolver = self.ctx.get(ValueResolver)
        for bound in self.ctx.get(BoundCalls).calls:
            if bound.spec.role is Role.EMA_FUNCTION and not bound.virtual:
                self._swapped_trees(bound)
        updates = self.ctx.get(InPlaceUpdates).updates
        if not updates:
            return
        objects = self.ctx.get(AveragingObjects)
        for update in updates:
            if update.old_weight is None or update.new_weight is None:
                continue
            if not objects.averages_weights(update):
                continue
            verdict = self._judge(update, objects.shadow_name(update))
            if verdict is not None:
                self.report(update.node, verdict.message, verdict.fix)

    # Functional updates ------------------------------------------------------------------------
    def _swapped_trees(self, bound: BoundCall) -> None:
        """``ema_params = optax.incremental_update(ema_params, params, 1 - decay)``: the
        result is bound to the tree passed as the *new* tensors, so the average is weighted
        by the weight meant for the live weights. Reported when that share is below one
        half (or, unresolved, written as ``1 - x``); swapped twice over (the decay given as
        ``step_size`` too) the average is right."""
        spec = bound.spec
        swapped = swapped_trees(self.ctx, bound)
        if swapped is None or spec.weight is None:
            return
        source_arg, shadow_arg, target = swapped
        weight = bound.value(spec.weight.param)
        if weight is None:
            return
        old = self.ctx.code(shadow_arg.value).strip()
        value = self._resolver.number(weight)
        kept: float | None = None
        if value is not None:
            kept = value if spec.weight.side is Side.NEW else 1.0 - value
            if not 0.0 < kept < 0.5:
                return
        elif spec.weight.side is not Side.NEW or _complement_of(weight) is None:
            return
        share = format_number(kept) if kept is not None else self.ctx.code(weight).strip()
        api = spec.short_name
        self.report(
            bound.call,
            f"{api}() returns {spec.weight.param} * {spec.source} + (1 - {spec.weight.param}) "
            f"* {spec.shadow}, and the average {target} is passed as {spec.source}: it keeps "
            f"{share} of itself and takes the rest from {old} per update, so {target} is the "
            f"live weights with a short lag, not an average; pass the average as "
            f"{spec.shadow} ({api}({old}, {target}, ...))",
            Fix.safe(
                "Exchange the two trees",
                Edit.replace(source_arg.value, shadow_arg.value),
                Edit.replace(shadow_arg.value, source_arg.value),
            ),
        )

    # Judging -----------------------------------------------------------------------------------
    def _number(self, coefficient: Coefficient) -> float | None:
        value = self._resolver.number(coefficient.expr)
        if value is None:
            return None
        return 1.0 - value if coefficient.complement else value

    def _judge(self, update: InPlaceUpdate, averaged: str) -> _Verdict | None:
        assert update.old_weight is not None and update.new_weight is not None
        shadow = self.ctx.code(strip_tensor(update.shadow))
        if update.away:
            return _Verdict(
                "away",
                f"the update moves {shadow} away from the live weights (a sign slip: it adds "
                f"the weight times ({shadow} - live) instead of (live - {shadow})): "
                f"{averaged} drifts away from the model and diverges instead of averaging it",
                self._flip_difference(update),
            )
        old = self._number(update.old_weight)
        new = self._number(update.new_weight)
        if old is not None and new is not None:
            total = old + new
            if not math.isclose(total, 1.0, abs_tol=1e-9):
                implicit = not self._in_module(update.new_weight.expr)
                on_live = (
                    "1 (on the live weights: add_ without alpha= adds them whole)"
                    if implicit
                    else f"{format_number(new)} (on the live weights)"
                )
                return _Verdict(
                    "sum",
                    f"the coefficients {format_number(old)} (on {shadow}) and "
                    f"{on_live} sum to "
                    f"{format_number(round(total, 10))}, not 1: {averaged} "
                    f"{'grows' if total > 1 else 'shrinks'} geometrically instead of "
                    f"averaging the weights",
                    None,
                )
            if 0.0 < old < new < 1.0 and not self._momentum_value(update):
                return _Verdict(
                    "swapped",
                    f"the coefficients are swapped: {shadow} keeps {format_number(old)} of "
                    f"itself and takes {format_number(new)} of the live weights per update, "
                    f"so {averaged} {_lag(old)}; a decay of {format_number(new)} belongs on "
                    f"{shadow}",
                    self._swap(update),
                )
            return None
        old_key = self._symbol(update.old_weight)
        new_key = self._symbol(update.new_weight)
        if old_key is None or new_key is None or old_key[0] != new_key[0]:
            return None
        name, old_complemented, base = old_key
        if old_complemented == new_key[1]:
            side = f"1 - {name}" if old_complemented else name
            return _Verdict(
                "sum",
                f"both {shadow} and the live weights are weighted by {side}: the coefficients "
                f"sum to 1 only if {name} is 0.5, so {averaged} grows or shrinks geometrically "
                f"instead of averaging the weights",
                None,
            )
        convention = self._convention(update, base)
        if not old_complemented and convention is not None and convention[0] == "rate":
            # ``momentum`` in the mmcv/ignite sense: the weight on the live weights.
            return _Verdict(
                "swapped",
                f"the coefficients are swapped: {shadow} is weighted by {name} and the live "
                f"weights by 1 - {name}, but {name} is the weight on the live weights here "
                f"({convention[1]}), so {averaged} is the live weights with a lag of about one "
                f"update, not an average",
                self._swap(update),
            )
        if self._momentum_value(update):
            return None  # a momentum that weighs the live weights: its value is EMA103's
        decay = convention is not None and convention[0] == "decay"
        if old_complemented and (decay or (convention is None and self._names_decay(name))):
            one_weight = update.old_weight.expr is update.new_weight.expr
            where = (
                "lerp's weight belongs to the new value"
                if one_weight and update.form in ("lerp", "foreach", "copy", "assign")
                else "the decay belongs on the average"
            )
            return _Verdict(
                "swapped",
                f"the coefficients are swapped: {shadow} is weighted by 1 - {name} and the "
                f"live weights by {name} ({where}), so {averaged} is the live weights with a "
                f"lag of about one update, not an average",
                self._swap(update),
            )
        return None

    def _symbol(self, coefficient: Coefficient) -> tuple[str, bool, cst.BaseExpression] | None:
        """``1 - (1 - d)`` -> ("d", False, d): the name a coefficient is built from,
        complemented or not, and the expression it is."""
        expr = _bare(coefficient.expr)
        complemented = coefficient.complement
        while True:
            inner = _complement_of(expr)
            if inner is None and isinstance(expr, cst.Name):
                # ``one_minus_decay = 1.0 - decay``: followed, never guessed from the name;
                # a helper's ``weight`` parameter: what its callers pass (``1. - decay``).
                value = self._resolver.assigned_value(expr) or self._passed(expr)
                inner = _complement_of(value) if value is not None else None
            if inner is None:
                break
            expr, complemented = _bare(inner), not complemented
        if not isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)):
            return None
        return self.ctx.code(expr), complemented, expr

    def _passed(self, name: cst.Name) -> cst.BaseExpression | None:
        """What every in-module caller of the function holding ``name`` (one of its
        parameters) passes for it, when they all pass the same expression."""
        function = self.ctx.index.enclosing(name, cst.FunctionDef)
        if function is None:
            return None
        params = function.params
        param = next(
            (p for p in all_params(params) if p.name.value == name.value),
            None,
        )
        if param is None:
            return None
        passed: list[cst.BaseExpression] = []
        for call in self._resolver.callers(function):
            arg = self._resolver.argument_for(function, param, call)
            if arg is None:
                return None
            passed.append(arg)
        if not passed or len({self.ctx.code(a).strip() for a in passed}) != 1:
            return None
        return passed[0]

    def _momentum_value(self, update: InPlaceUpdate) -> bool:
        """The live weights are weighed by a name that says momentum, and the average by
        one minus it (``lerp_(p, self.momentum)``): the arithmetic is the convention its
        name states, so a momentum near one is a wrong value (EMA103's), not a swap."""
        assert update.old_weight is not None and update.new_weight is not None
        old_key = self._symbol(update.old_weight)
        new_key = self._symbol(update.new_weight)
        if old_key is None or new_key is None or old_key[0] != new_key[0]:
            return False
        name = old_key[0]
        return old_key[1] and not new_key[1] and "momentum" in tokens(name)

    @staticmethod
    def _names_decay(name: str) -> bool:
        if name in _SHORT_DECAYS:
            return True
        words = tokens(name.replace("[", ".").replace("]", "").replace('"', "").replace("'", ""))
        return any(w in _DECAY_WORDS for w in words) or ("ema" in words and "rate" in words)

    def _convention(
        self, update: InPlaceUpdate, expr: cst.BaseExpression
    ) -> tuple[str, str] | None:
        """Which side the code's own values put a weight on: ("decay", why) when they say it
        is the weight on the average (above 0.5), ("rate", why) when they say it is the weight
        on the live weights (below 0.5, mmcv's and ignite's ``momentum``), None when they do
        not say. A parameter's default says it first (the author's convention, whatever the
        callers pass); then what the callers pass (a hard copy's 0 or 1 aside); then the
        values of the name where it is bound; then the class's attribute of the same name
        (``momentum = getattr(engine.state, name)`` in a class built with ``momentum=0.0002``).
        """
        found = self._weight_values(update, expr)
        if found is None:
            return None
        values, why = found
        values = [v for v in values if 0.0 < v < 1.0 and v != 0.5]
        if not values:
            return None
        shown = ", ".join(format_number(v) for v in dict.fromkeys(values))
        if all(v > 0.5 for v in values):
            return "decay", f"{why}: {shown}"
        if all(v < 0.5 for v in values):
            return "rate", f"{why}: {shown}"
        return None

    def _weight_values(
        self, update: InPlaceUpdate, expr: cst.BaseExpression
    ) -> tuple[list[float], str] | None:
        if not isinstance(expr, cst.Name):
            return None
        name = expr.value
        function = self.ctx.index.enclosing(update.node, cst.FunctionDef)
        if function is not None:
            params = function.params
            for param in all_params(params):
                if param.name.value != name:
                    continue
                if param.default is not None:
                    value = self._resolver.number(param.default)
                    return ([value], f"the default of {name}") if value is not None else None
                passed = [
                    self._resolver.number(arg)
                    for _, arg in self._resolver.arguments_for(function, param)
                    if arg is not None
                ]
                numbers = [v for v in passed if v is not None]
                return (numbers, f"what the callers pass for {name}") if numbers else None
        bound = [v.number for v in self._resolver.possible(expr) if v.number is not None]
        if bound:
            return bound, f"the value of {name}"
        cls = self.ctx.index.enclosing(update.node, cst.ClassDef)
        if cls is None:
            return None
        for node in self.ctx.index.descendants(cls, cst.Attribute):
            assert isinstance(node, cst.Attribute)
            if (
                node.attr.value == name
                and isinstance(node.value, cst.Name)
                and node.value.value == "self"
            ):
                value = self._resolver.number(node)
                if value is not None:
                    return [value], f"self.{name}"
                break
        # A subclass handing its constructor's ``momentum=0.0002`` to the base class.
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef) and statement.name.value == "__init__":
                params = statement.params
                for param in all_params(params):
                    if param.name.value == name and param.default is not None:
                        value = self._resolver.number(param.default)
                        if value is not None:
                            return [value], f"the constructor's default of {name}"
        return None

    # Fixes --------------------------------------------------------------------------------------
    def _place(self, old: cst.BaseExpression, new: cst.BaseExpression) -> cst.BaseExpression:
        """``new`` shaped for the position of ``old``: bare in an argument, parenthesised as
        an operand."""
        parent = self.ctx.parent(old)
        bare = _bare(new)
        if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation)) and _compound(bare):
            return bare.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return bare

    def _complement(self, node: cst.BaseExpression) -> cst.BaseExpression:
        inner = _complement_of(node)
        if inner is not None:
            return inner
        bare = _bare(node)
        if isinstance(bare, cst.Float):
            text = complement_text(bare.value)
            if text is not None:
                return cst.Float(text)
        operand = bare
        if _compound(bare):
            operand = bare.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return cst.BinaryOperation(
            cst.Integer("1"),
            cst.Subtract(
                whitespace_before=cst.SimpleWhitespace(" "),
                whitespace_after=cst.SimpleWhitespace(" "),
            ),
            operand,
        )

    def _in_module(self, node: cst.CSTNode) -> bool:
        return id(node) in self.ctx.index.order

    def _swap(self, update: InPlaceUpdate) -> Fix | None:
        old = update.old_weight
        new = update.new_weight
        assert old is not None and new is not None
        if not (self._in_module(old.expr) and self._in_module(new.expr)):
            return None  # an implicit weight (``add_(p)``'s alpha of 1)
        index = self.ctx.index
        here = index.enclosing(update.node, cst.FunctionDef)
        if any(index.enclosing(w.expr, cst.FunctionDef) is not here for w in (old, new)):
            return None  # written in another function (one a tree map applies, maybe shared)
        if old.expr is new.expr:
            weight = new.expr
            return Fix.safe(
                "Use the complement of the weight",
                Edit.replace(weight, self._place(weight, self._complement(weight))),
            )
        if old.complement or new.complement:
            return None
        return Fix.safe(
            "Exchange the two coefficients",
            Edit.replace(old.expr, self._place(old.expr, new.expr)),
            Edit.replace(new.expr, self._place(new.expr, old.expr)),
        )

    def _flip_difference(self, update: InPlaceUpdate) -> Fix | None:
        shadow = self.ctx.code(strip_tensor(update.shadow))
        for node in self.ctx.index.descendants(update.node, cst.BinaryOperation):
            if not (
                isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract)
            ):
                continue
            if (
                self.ctx.code(strip_tensor(node.left)) == shadow
                or self.ctx.code(strip_tensor(node.right)) == shadow
            ):
                return Fix.safe(
                    "Move toward the live weights",
                    Edit.replace(node, node.with_changes(left=node.right, right=node.left)),
                )
        return None
