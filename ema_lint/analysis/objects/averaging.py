"""What each averaging object of a module is, and what it is used for.

An *averaging object* is an averaged copy of weights: one bound from a known API call
(``ModelEmaV2(model)``, ``AveragedModel(model, multi_avg_fn=...)``, an mmengine config
``dict(type='EMAHook', ...)``, a Keras optimizer with ``use_ema=True``), the shadow of a
functional update (``optax.incremental_update(params, target, tau)``), or a hand-made shadow:
``copy.deepcopy(model)`` whose name says it is averaged (``ema*``, ``*_ema``, ``shadow``,
``avg*``, ``swa*``, ``teacher``, ``momentum_encoder``, ``target_net``, ...) or that is the
target of an in-place average update (``InPlaceUpdates``).

Objects are tracked through assignments, ``self.`` attributes across the methods of one
class, function arguments and return values within the module, and the wrappers' inner
model (``ema.module``, ``ema.ema``, ``ema.ema_model``). Each is classified by use:

- ``Use.EVAL``: averaged weights for evaluation or export (the default for EMA APIs);
- ``Use.TEACHER``: a self-distillation or consistency target (DINO, MoCo, BYOL, mean
  teacher): named so, or its output feeds a loss in a function that backpropagates;
- ``Use.TARGET``: an RL target network (``tau``/``polyak``, ``target_q``...);
- ``Use.NOT_WEIGHTS``: averages something else (``optax.ema`` gradients, TF loss averages);
- ``Use.UNKNOWN``: a functional update whose purpose the code does not show.

Public API (for the loop, SWA and hand-written-update rules)::

    objects = ctx.get(AveragingObjects)
    objects.objects                      # every AveragingObject, in document order
    objects.for_expression(node)         # the object an expression refers to, or None
    objects.passed_weights(node)         # ... or whose weights it is (``ema.parameters()``)
    objects.for_call(call)               # the object a creating/weight call belongs to
    objects.of_update(update)            # the object a hand-written update averages into
    objects.averages_weights(update)     # whether a hand-written update averages weights
    objects.shadow_name(update)          # the average it writes, for messages
    objects.parameters_frozen(obj)       # a hand-made copy's parameters no longer need grad
    objects.loss_inputs(obj)             # its calls whose output feeds a backpropagated loss
    obj.kind / obj.use / obj.spec / obj.bound / obj.weight_call / obj.names
    obj.source / obj.updates / obj.inplace / obj.weight_reassigned / obj.reasons
    obj.module_copy                      # a deepcopy of a module (it has the model's buffers)
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from ema_lint.analysis.objects.api_calls import BoundCalls
from ema_lint.analysis.objects.apis import API_TABLE, ApiSpec, BoundCall, Role
from ema_lint.analysis.objects.updates import (
    WEIGHT_METHODS,
    InPlaceUpdate,
    InPlaceUpdates,
    complementary,
    container_of,
    strip_tensor,
    uncast,
)
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.syntax.vocabulary import (
    COPY_AVERAGE_WORDS,
    NOT_WEIGHT_TOKENS,
    TARGET_PAIRS,
    TEACHER_PAIRS,
    TEACHER_TOKENS,
    has_pair,
    is_averaged_name,
    names_an_average,
    names_averaging_pair,
    optimizer_name,
    tokens,
)

from ..syntax.params import all_params, positional_names


class Use(str, enum.Enum):
    EVAL = "eval-ema"
    TEACHER = "teacher"
    TARGET = "target-network"
    NOT_WEIGHTS = "not-weights"
    UNKNOWN = "unknown"


class Method(str, enum.Enum):
    EMA = "ema"  # exponential moving average
    SWA = "swa"  # equal-weight running mean
    UNKNOWN = "unknown"  # a custom averaging function


# Roles whose call creates an object holding averaged weights (or averaging state).
_CREATING = {
    Role.EMA_MODEL,
    Role.SWA_MODEL,
    Role.EMA_CALLBACK,
    Role.SWA_CALLBACK,
    Role.EMA_HOOK,
    Role.OPTIMIZER,
    Role.GRADIENT_EMA,
}
# Attributes of a wrapper that are the averaged model itself.
_INNER = {"module", "ema", "ema_model", "averaged_model", "_average_model", "model", "shadow"}
_INPLACE_METHODS = {"mul_", "add_", "lerp_", "copy_", "sub_"}
_WEIGHT_ATTRIBUTES = {"decay", "beta", "momentum", "ema_momentum", "rate", "tau", "alpha"}

# Words in a helper's, its parameters' or its weight's names that say an in-place
# combination of two sequences is something else than an average of a trained model:
# interpolation and merging weights (``tau``, ``alpha``, ``lam``), RL target updates,
# model soups, optimizer moments and running statistics.
_NOT_AVERAGING_HELPER_WORDS = frozenset(
    {
        "tau",
        "polyak",
        "soft",
        "target",
        "tgt",
        "merge",
        "merged",
        "merging",
        "interp",
        "interpolate",
        "interpolation",
        "lam",
        "lambda",
        "alpha",
        "mix",
        "mixup",
        "slerp",
        "soup",
        "fisher",
        "lr",
        "running",
        "stats",
        "bn",
        "moment",
        "moments",
        "exp",
        "sq",
        "hard",
        "copy",
    }
    | NOT_WEIGHT_TOKENS
)

# Words of a coefficient that say it is a decay, whichever side it is written on.
_DECAY_NAME_WORDS = {"decay", "momentum", "beta", "rate", "mu"}
_LOSS_CALL = re.compile(
    r"(loss|criterion|distill|consistency|kl_div|mse|cross_entropy|cosine_similarity|byol|dino)",
    re.IGNORECASE,
)


_PARAMETER_USES = {"update", "update_parameters", "step", "apply_shadow", "copy_to", "store"}


_PLAIN_TYPES = frozenset({"bool", "int", "float", "str", "bytes"})


def _plain_value(param: cst.Param) -> bool:
    """A parameter declared to hold a plain value (a flag, a number, a string: by its
    default or its annotation), which no module passes an averaging object for
    (``extract_ema=False``, ``ema_decay: float``): its callers are not looked up."""
    default = param.default
    if isinstance(default, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(default, cst.Name) and default.value in ("True", "False"):
        return True
    annotation = param.annotation.annotation if param.annotation is not None else None
    return isinstance(annotation, cst.Name) and annotation.value in _PLAIN_TYPES


def _model_like(node: cst.BaseExpression) -> bool:
    """A model or its parameters as an argument (``model``, ``self.model``, ``m.parameters()``)."""
    if isinstance(node, cst.Call):
        func = node.func
        return isinstance(func, cst.Attribute) and func.attr.value in (
            "parameters",
            "named_parameters",
            "state_dict",
        )
    code = dotted_name(node)
    if code is None:
        return False
    words = tokens(code)
    if any(w in NOT_WEIGHT_TOKENS for w in words):
        return False
    return any(w in ("model", "net", "module", "network", "student", "encoder") for w in words)


def _is_false(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def use_from_name(name: str) -> Use | None:
    """What a name says about the use of averaged weights, if anything."""
    words = tokens(name)
    if any(w in TEACHER_TOKENS for w in words) or any(has_pair(words, p) for p in TEACHER_PAIRS):
        return Use.TEACHER
    if any(has_pair(words, p) for p in TARGET_PAIRS):
        return Use.TARGET
    return None


# Words in a rate's or helper's names that say what an average is for, beyond the name of
# the copy: an RL target network's rate, a teacher's momentum.
_TARGET_WORDS = ("tau", "polyak")
_TEACHER_WORDS = ("teacher", "momentum_schedule")


def named_use(use: Use, names: str) -> Use:
    """``use``, unless it is an evaluation EMA's and ``names`` (a rate's, a helper's and its
    parameters', as text) say a target network's rate (``tau``) or a teacher's momentum."""
    if use is not Use.EVAL:
        return use
    text = names.lower()
    if any(word in text for word in _TARGET_WORDS):
        return Use.TARGET
    if any(word in text for word in _TEACHER_WORDS):
        return Use.TEACHER
    return use


def spec_use(spec: ApiSpec) -> Use:
    """The use an API's averages have when nothing else says (its ``default_use``)."""
    return _SPEC_USES.get(spec.default_use, Use.EVAL)


_SPEC_USES = {"target": Use.TARGET, "teacher": Use.TEACHER, "unknown": Use.UNKNOWN}


@dataclass(eq=False)
class AveragingObject:
    """One averaged copy of weights (or averaging state) and what it is used for."""

    kind: Method
    use: Use
    # The creating node: an API call or config mapping, a ``deepcopy`` call, or (for
    # functional updates and hand-made shadows found by their update) the update itself.
    creation: cst.CSTNode
    bound: BoundCall | None = None
    # The spec that defines the averaging (a hook's target class when it forwards).
    spec: ApiSpec | None = None
    # The bound call that carries the averaging weight (AveragedModel: its EMA function).
    weight_call: BoundCall | None = None
    # Expressions the object is bound to (``ema``, ``self.model_ema``), and their code.
    bindings: list[cst.BaseExpression] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    # The online model (or parameters) it averages, as passed.
    source: cst.BaseExpression | None = None
    # Calls that update it (``ema.update(model)``, ``ema.step(params)``, a functional
    # update) and hand-written in-place updates of its tensors.
    updates: list[cst.CSTNode] = field(default_factory=list)
    inplace: list[InPlaceUpdate] = field(default_factory=list)
    # The averaging weight is assigned after construction (``ema.decay = schedule[i]``):
    # the constructor value is only a starting point.
    weight_reassigned: bool = False
    # Why the object was classified as it is (for messages and debugging).
    reasons: list[str] = field(default_factory=list)
    # A hand-made ``deepcopy`` of a module: it carries the model's buffers (BatchNorm
    # statistics) and its parameters keep ``requires_grad`` unless frozen.
    module_copy: bool = False
    # For a shadow that is a parameter of a helper (``def update_ema(target_params,
    # source_params, rate)``): the helper, whose names say what it averages for.
    helper: cst.FunctionDef | None = None

    @property
    def hand_made(self) -> bool:
        return self.bound is None

    @property
    def virtual(self) -> bool:
        return self.bound is not None and self.bound.virtual

    @property
    def name(self) -> str:
        """The name people know the object by (first binding), or the API's short name."""
        if self.names:
            return self.names[0]
        if self.spec is not None:
            return self.spec.short_name
        return "the averaged copy"


class AveragingObjects:
    """The averaging objects of a module, and which expressions refer to them."""

    MAX_DEPTH = 12

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.resolver = ctx.get(ValueResolver)
        self.imports = ctx.get(ImportTable)
        self.objects: list[AveragingObject] = []
        self._by_creation: dict[int, AveragingObject] = {}
        self._memo: dict[int, AveragingObject | None] = {}
        self._by_update: tuple[int, dict[int, AveragingObject]] | None = None
        self._freeze_nodes: tuple[list[cst.Call], list[cst.Assign]] | None = None
        self._deepcopies: dict[int, cst.Call] = {}
        self._bound = ctx.get(BoundCalls)
        self._has_inplace: bool | None = None
        self._called: dict[int, list[cst.Call]] | None = None
        self._returns: dict[str, list[cst.BaseExpression]] = {}
        # Updates an ``AveragedModel`` is handed (``avg_fn``, ``multi_avg_fn``).
        self._given_updates: set[int] = set()
        # ``self.x`` averaging objects another module's class sets for a class of this one
        # (a base class's ``__init__``, or a subclass's), by (class, attribute).
        self._inherited: dict[tuple[int, str], AveragingObject] = {}
        # Helper updates that average a deep copy of the model a loop trains, recognised by
        # their arithmetic and their calls alone (``_trained_copy_helper``).
        self._trained_copy_updates: set[int] = set()

        self._collect_api_objects()
        self._collect_subclassed_averages()
        self._collect_shadows()
        self._collect_parameters()
        self._collect_inherited()
        if not self.objects:
            return
        self._link_bindings()
        self._link_updates()
        for obj in self.objects:
            self._classify(obj)
        self.objects.sort(key=lambda o: self.index.order[id(o.creation)])

    @classmethod
    def build(cls, ctx: FileContext) -> AveragingObjects:
        return cls(ctx)

    # Public -----------------------------------------------------------------------------------
    def for_expression(self, node: cst.BaseExpression) -> AveragingObject | None:
        """The object ``node`` refers to (through names, ``self.`` attributes, arguments,
        return values and the wrapper's inner model), or None."""
        return self._refer(node, 0)

    def passed_weights(self, node: cst.BaseExpression) -> AveragingObject | None:
        """The object ``node`` refers to, or whose weights it is (``ema.parameters()``,
        ``list(ema.parameters())``, a name bound once to them): what a caller hands a helper
        over two sequences of tensors."""
        return self._passed_object(node, 0)

    def _passed_object(self, node: cst.BaseExpression, depth: int) -> AveragingObject | None:
        obj = self._refer(node, depth)
        if obj is not None or not self._may_update():
            return obj
        container, method = self.ctx.get(InPlaceUpdates).container(node)
        if method not in WEIGHT_METHODS or container is node:
            return None
        return self._refer(container, depth)

    def for_call(self, node: cst.CSTNode) -> AveragingObject | None:
        """The object a creating call (or mapping), or the call carrying its weight, makes."""
        found = self._by_creation.get(id(node))
        if found is not None:
            return found
        for obj in self.objects:
            if obj.weight_call is not None and obj.weight_call.call is node:
                return obj
        return None

    def names_only(self, obj: AveragingObject) -> bool:
        """An API object that averages nothing: bound to local names only, never updated,
        and used only through methods that neither update nor apply it (TF's
        ``ExponentialMovingAverage(decay=0.0)`` kept for ``ema.average_name(var)``, to map
        checkpoint names). Its weight is moot. False as soon as it escapes (passed on,
        returned, stored on an object), since it may be updated where it goes."""
        spec = obj.spec
        if obj.bound is None or spec is None or obj.updates or not spec.update_methods:
            return False
        if not obj.bindings or not all(isinstance(b, cst.Name) for b in obj.bindings):
            return False
        names = {b.value for b in obj.bindings if isinstance(b, cst.Name)}
        used = {*spec.update_methods, *spec.apply_methods, *spec.store_methods}
        scope = self.index.enclosing(obj.creation, cst.FunctionDef)
        seen = False
        for node in self.index.descendants(scope or self.ctx.module, cst.Name):
            assert isinstance(node, cst.Name)
            if node.value not in names or any(node is b for b in obj.bindings):
                continue
            parent = self.index.parent(node)
            if isinstance(parent, cst.AssignTarget):
                continue
            call = self.index.parent(parent) if isinstance(parent, cst.Attribute) else None
            if not (
                isinstance(parent, cst.Attribute)
                and parent.value is node
                and isinstance(call, cst.Call)
                and call.func is parent
                and parent.attr.value not in used
            ):
                return False
            seen = True
        return seen

    def of_kind(self, *uses: Use) -> list[AveragingObject]:
        return [o for o in self.objects if o.use in uses]

    def of_update(self, update: InPlaceUpdate) -> AveragingObject | None:
        """The object a hand-written update averages into, if it is one."""
        table = self._by_update
        size = sum(len(obj.inplace) for obj in self.objects)  # grows while objects are found
        if table is None or table[0] != size:
            owners: dict[int, AveragingObject] = {}
            for obj in reversed(self.objects):  # the first object holding it wins
                for u in obj.inplace:
                    owners[id(u)] = obj
            table = self._by_update = (size, owners)
        return table[1].get(id(update))

    def shadow_name(self, update: InPlaceUpdate) -> str:
        """What people call the average a hand-written update writes (for messages)."""
        obj = self.of_update(update)
        if obj is not None and obj.names:
            return obj.names[0]
        node = update.shadow_container if update.shadow_container is not None else update.shadow
        return self._code(node)

    def averages_weights(self, update: InPlaceUpdate) -> bool:
        """Whether a hand-written update averages model weights into a shadow.

        It does when it updates an averaging object that holds weights, or when its source is
        read from a model's weights (``parameters()``, ``state_dict()``...) into a separate
        container. It does not when the source is a gradient or a computed value (Adam's
        ``exp_avg``, Fisher information), when the shadow is a loss or metric average, or
        when the *live* model is pulled toward the average (the source is the averaged
        copy).
        """
        if update.source is None:
            return False
        if update.form in ("tree_map", "returned", "avg_fn"):
            return not any(
                w in NOT_WEIGHT_TOKENS
                for side in (update.shadow, update.source)
                for w in tokens(self._code(side))
            )
        source = uncast(strip_tensor(update.source))  # ``v.half()`` is still ``v``'s weights
        listed = update.form == "foreach" and update.source_method in WEIGHT_METHODS
        if not isinstance(source, (cst.Name, cst.Attribute, cst.Subscript)) and not listed:
            return False  # a computed value: ``p ** 2``, ``grad * lr``
        if isinstance(source, cst.Attribute) and source.attr.value in ("grad", "main_grad"):
            return False
        obj = self.of_update(update)
        if obj is not None and obj.use is Use.NOT_WEIGHTS:
            return False
        if (obj is None or obj.bound is None) and not (
            self._named_average(update, obj)
            or self._decay_between_models(update)
            or id(update) in self._trained_copy_updates
        ):
            return False
        if update.source_container is not None:
            pulled = self._refer(update.source_container, 0)
            if pulled is not None and pulled is not obj:
                return False
            if (
                obj is None
                and is_averaged_name(self._code(update.source_container))
                and (
                    update.shadow_container is None
                    or not is_averaged_name(self._code(update.shadow_container))
                )
            ):
                return False  # ``model`` updated from ``ema``: the average copied back
        if obj is not None:
            if obj.bound is not None or obj.module_copy:
                return True
            # A dict or list of tensors: averaged weights if either side is read from them.
            if update.source_method in WEIGHT_METHODS or update.shadow_method in WEIGHT_METHODS:
                return True
            # A helper given the two sequences or tensors, called with an averaged copy
            # (``update_ema(ema_params, model_params, rate)``, the copy made in another
            # file): what the helper's arithmetic says, as when no caller is known.
            return self._passed_sequences(update) or self._passed_tensors(update)
        shadow = update.shadow_container
        if shadow is None:
            return self._passed_tensors(update)
        if update.source_method not in WEIGHT_METHODS:
            return self._passed_sequences(update) or self._passed_tensors(update)
        if update.source_container is not None and self._code(shadow) == self._code(
            update.source_container
        ):
            return False
        return not any(w in NOT_WEIGHT_TOKENS for w in tokens(self._code(shadow)))

    def _passed_sequences(self, update: InPlaceUpdate) -> bool:
        """``def update_ema(target_params, source_params, rate): for t, s in zip(...)``: both
        sides are sequences the helper is given (the update is named as an average, checked
        by the caller); not when either name says gradients, losses or metrics."""
        shadow, source = update.shadow_container, update.source_container
        if not isinstance(source, cst.Name) or update.loop is None:
            return False
        # The shadow is given too, or kept on the object under an averaged name
        # (``self.shadow_params``, a list of clones made at construction).
        kept = (
            isinstance(shadow, cst.Attribute)
            and isinstance(shadow.value, cst.Name)
            and shadow.value.value == "self"
            and is_averaged_name(shadow.attr.value)
        )
        if not kept and not isinstance(shadow, cst.Name):
            return False
        function = self.index.enclosing(update.node, cst.FunctionDef)
        if function is None:
            return False
        params = function.params
        names = {p.name.value for p in all_params(params)}
        given = [source] if kept else [shadow, source]
        if any(
            not isinstance(n, cst.Name)
            or n.value not in names
            or self.resolver.assigned_value(n) is not None  # rebound: not the sequence given
            for n in given
        ):
            return False
        if self._code(shadow) == self._code(source):
            return False
        return not any(
            w in NOT_WEIGHT_TOKENS for side in (shadow, source) for w in tokens(self._code(side))
        )

    def _passed_tensors(self, update: InPlaceUpdate) -> bool:
        """``def _lerp_(self, ema_v, model_v, weight): ema_v.lerp_(model_v, weight)``: a
        helper given the two tensors, the shadow's parameter named as averaged; not when a
        name says gradients, losses or metrics."""
        if update.loop is not None or update.source is None:
            return False
        shadow = strip_tensor(update.shadow)
        if isinstance(shadow, cst.Subscript) and self._code(shadow.slice[0]).strip() == "...":
            shadow = shadow.value  # ``ema[...]``: the whole array
        source = uncast(strip_tensor(update.source))
        if not isinstance(shadow, cst.Name) or not isinstance(source, cst.Name):
            return False
        function = self.index.enclosing(update.node, cst.FunctionDef)
        if function is None or shadow.value == source.value:
            return False
        params = function.params
        names = {p.name.value for p in all_params(params)}
        if shadow.value not in names or source.value not in names:
            return False
        if not is_averaged_name(shadow.value):
            return False
        return not any(
            w in NOT_WEIGHT_TOKENS for side in (shadow, source) for w in tokens(side.value)
        )

    def _decay_between_models(self, update: InPlaceUpdate) -> bool:
        """``accumulate(model1, model2, decay)``: one model's weights moved toward another's
        by a decay and its complement (``p1.mul_(decay).add_(p2, alpha=1 - decay)``), whatever
        the names of the models: that arithmetic is an average. Interpolation weights
        (``alpha``, ``tau``, ``lam``) do not count: merging uses them too."""
        if update.shadow_method not in WEIGHT_METHODS or update.source_method not in WEIGHT_METHODS:
            return False
        shadow, source = update.shadow_container, update.source_container
        if shadow is None or source is None or self._code(shadow) == self._code(source):
            return False
        old, new = update.old_weight, update.new_weight
        if old is None or new is None:
            return False
        pair = complementary(old, new, self._code)
        if pair is None:
            return False
        if any(w in _DECAY_NAME_WORDS for w in tokens(pair)):
            return True
        # A running mean of another model's weights (``swa_p.add_(-inv * swa_p)`` then
        # ``swa_p.add_(inv * p)``) into a copy, function or class named as an average
        # (``swa_model``, ``WeightSWA``): whatever the weight is called.
        names = [self._code(shadow)]
        names.extend(
            scope.name.value
            for scope in self.index.ancestors(update.node)
            if isinstance(scope, (cst.FunctionDef, cst.ClassDef))
        )
        return any(names_an_average(name, COPY_AVERAGE_WORDS) for name in names)

    def _trained_copy_helper(
        self, update: InPlaceUpdate, container: cst.BaseExpression, obj: AveragingObject
    ) -> bool:
        """A helper with neutral names whose only evidence is its arithmetic: ``def
        step(xs, ys, k): for x, y in zip(xs, ys): x.mul_(k).add_(y, alpha=1 - k)`` called as
        ``step(twin.parameters(), net.parameters(), 0.999)`` with ``twin =
        copy.deepcopy(net)``. All must hold: the update moves one sequence toward the other
        by a weight and its complement (``mul_``/``add_``, ``lerp_``, a difference form);
        every call of the module passes ``obj``'s weights first and the weights of the
        model it copies second; one call runs once per iteration of a loop that trains that
        model (its forward, and ``backward()`` or an optimizer's ``step()``, in the loop);
        and no name of the helper, its parameters or its weight says interpolation,
        merging, a target network, moments or statistics."""
        if update.loop is None or update.away or obj.source is None:
            return False
        old, new = update.old_weight, update.new_weight
        if old is None or new is None:
            return False
        pair = complementary(old, new, self._code)
        source = update.source_container
        if pair is None or not isinstance(container, cst.Name) or not isinstance(source, cst.Name):
            return False
        shadow_binding = self.resolver.bindings_of(container) or []
        source_binding = self.resolver.bindings_of(source) or []
        if len(shadow_binding) != 1 or len(source_binding) != 1:
            return False
        function = shadow_binding[0].function
        live_param = source_binding[0].param
        if (
            not isinstance(function, cst.FunctionDef)
            or source_binding[0].function is not function
            or shadow_binding[0].param is None
            or live_param is None
        ):
            return False
        names = [function.name.value, pair, *(p.name.value for p in all_params(function.params))]
        if any(w in _NOT_AVERAGING_HELPER_WORDS for n in names for w in tokens(n)):
            return False
        if self._writes_source(function, update, source):
            return False  # Lookahead: the average is written back into the model
        model = self._code(obj.source)
        updates = self.ctx.get(InPlaceUpdates)
        trained = False
        for call, argument in self.resolver.arguments_for(function, shadow_binding[0].param):
            live = self.resolver.argument_for(function, live_param, call)
            if argument is None or live is None:
                return False
            if updates.container(argument)[1] not in WEIGHT_METHODS:
                return False
            found, method = updates.container(live)
            if method not in WEIGHT_METHODS or self._code(found) != model:
                return False
            trained = trained or self._trains_each_iteration(call, model)
        return trained

    def _writes_source(
        self, function: cst.FunctionDef, update: InPlaceUpdate, source: cst.Name
    ) -> bool:
        """The helper writes the sequence it averages toward (``y.copy_(x)``, ``ys[i] =
        ...``): a Lookahead or a swap, not an average kept beside the model."""
        live = {source.value}
        bare = strip_tensor(update.source) if update.source is not None else None
        while isinstance(bare, (cst.Attribute, cst.Subscript)):
            bare = bare.value
        if isinstance(bare, cst.Name):
            live.add(bare.value)
        for node in self.index.descendants(function, (cst.Call, cst.AssignTarget)):
            if isinstance(node, cst.Call):
                func = node.func
                if not (isinstance(func, cst.Attribute) and func.attr.value.endswith("_")):
                    continue
                target: cst.BaseExpression = func.value
            else:
                assert isinstance(node, cst.AssignTarget)
                target = node.target
                if isinstance(target, cst.Name):
                    continue  # a rebinding writes nothing
            while isinstance(target, (cst.Attribute, cst.Subscript, cst.Call)):
                target = target.func if isinstance(target, cst.Call) else target.value
            if isinstance(target, cst.Name) and target.value in live:
                return True
        return False

    def _trains_each_iteration(self, call: cst.Call, model: str) -> bool:
        """``call`` runs once per iteration of the innermost loop around it, and that loop
        trains ``model``: it runs its forward (``model(x)``) and ``backward()`` or an
        optimizer's ``step()``."""
        loop = self.index.enclosing(call, cst.For, cst.While, cst.FunctionDef, cst.Lambda)
        if not isinstance(loop, (cst.For, cst.While)):
            return False
        forward = steps = False
        for node in self.index.descendants(loop.body, cst.Call):
            assert isinstance(node, cst.Call)
            func = node.func
            inner = self.index.enclosing(node, cst.For, cst.While, cst.FunctionDef, cst.Lambda)
            if inner is not loop:
                continue  # an inner loop's step: the call runs once per many (Reptile, SWA)
            if self._code(func) in (model, f"{model}.forward"):
                forward = True
            elif isinstance(func, cst.Attribute) and (
                func.attr.value == "backward"
                or (
                    func.attr.value == "step"
                    and not node.args
                    and optimizer_name(dotted_name(func.value) or "")
                )
            ):
                steps = True
        return forward and steps

    def _named_average(self, update: InPlaceUpdate, obj: AveragingObject | None) -> bool:
        """The update's shadow, its container, or the function or class holding it is named
        as an average."""
        names = list(obj.names) if obj is not None else []
        if update.shadow_container is not None:
            names.append(self._code(update.shadow_container))
        names.append(self._code(strip_tensor(update.shadow)))
        for scope in self.index.ancestors(update.node):
            if isinstance(scope, (cst.FunctionDef, cst.ClassDef)):
                names.append(scope.name.value)
        if obj is not None and obj.module_copy:
            return any(
                names_an_average(name, COPY_AVERAGE_WORDS) or is_averaged_name(name)
                for name in names
            )
        return any(names_an_average(name) for name in names) or self._averaging_helper(update)

    def _averaging_helper(self, update: InPlaceUpdate) -> bool:
        """A helper given the two sequences (``_passed_sequences``) whose own name says it
        averages (``def ema(xs, ys, k)``, ``def average(...)``, ``def momentum_update(...)``)
        or whose parameters are named as an average and what it follows (``def sync(target,
        source, k)``, ``def step(average, current, k)``), when a call of the module hands it
        weights (a loss meter is given losses)."""
        shadow, source = update.shadow_container, update.source_container
        if shadow is None or source is None or not self._passed_sequences(update):
            return False
        if is_averaged_name(self._code(source)) and not is_averaged_name(self._code(shadow)):
            return False  # ``update_model_with_ema(model, ema, beta)``: the average copied back
        function = self.index.enclosing(update.node, cst.FunctionDef)
        assert function is not None  # _passed_sequences holds
        name = function.name.value
        if names_an_average(name) or names_averaging_pair(self._code(shadow), self._code(source)):
            return self._given_weights(function, (shadow, source))
        # ``average``/``avg`` alone also names model soups and checkpoint averaging, mixed
        # once: the helper must run per step.
        return is_averaged_name(name) and self._given_weights(
            function, (shadow, source), per_step=True
        )

    def _given_weights(
        self,
        function: cst.FunctionDef,
        sides: tuple[cst.BaseExpression, ...],
        per_step: bool = False,
    ) -> bool:
        """A call of the module (inside a loop, if ``per_step``) hands ``function`` a
        model's weights (``m.parameters()``, ``list(ema.state_dict().values())``) or an
        averaging object for one of ``sides`` (its parameters): what it averages are
        weights, not losses or metrics."""
        updates = self.ctx.get(InPlaceUpdates)
        for side in sides:
            bindings = self.resolver.bindings_of(side) if isinstance(side, cst.Name) else None
            if not bindings or len(bindings) != 1 or bindings[0].param is None:
                continue
            for call, argument in self.resolver.arguments_for(function, bindings[0].param):
                if argument is None or (per_step and not self._in_loop(call)):
                    continue
                if updates.container(argument)[1] in WEIGHT_METHODS or (
                    self._refer(argument, 1) is not None
                ):
                    return True
        return False

    def _in_loop(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, (cst.For, cst.While)) for a in self.index.ancestors(node))

    def parameters_frozen(self, obj: AveragingObject) -> bool | None:
        """Whether a hand-made copy's parameters were set not to require grad
        (``deepcopy(model).requires_grad_(False)``, ``ema.requires_grad_(False)``, or
        ``p.requires_grad = False`` over its parameters); None when not a hand-made copy."""
        if not obj.module_copy:
            return None
        if self._copied_while_frozen(obj):
            return True
        calls, assigns = self._freezes()
        for call in calls:
            func = call.func
            assert isinstance(func, cst.Attribute)
            if self.index.contains(obj.creation, call) or self._refer(func.value, 0) is obj:
                return True
            if isinstance(func.value, cst.Name) and self._over_parameters_of(call, obj):
                return True  # for p in ema.parameters(): p.requires_grad_(False)
        return any(self._over_parameters_of(node, obj) for node in assigns)

    def _freezes(self) -> tuple[list[cst.Call], list[cst.Assign]]:
        """The module's ``x.requires_grad_(False)`` calls and ``p.requires_grad = False``
        assignments, found once (asked per hand-made copy)."""
        if self._freeze_nodes is None:
            calls = [
                call
                for call in self.ctx.nodes(cst.Call)
                if isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "requires_grad_"
                and call.args
                and _is_false(call.args[0].value)
            ]
            assigns = []
            for node in self.ctx.nodes(cst.Assign):
                target = node.targets[0].target if len(node.targets) == 1 else None
                if (
                    isinstance(target, cst.Attribute)
                    and target.attr.value == "requires_grad"
                    and isinstance(target.value, cst.Name)
                    and _is_false(node.value)
                ):
                    assigns.append(node)
            self._freeze_nodes = (calls, assigns)
        return self._freeze_nodes

    def built_frozen(self, model: cst.BaseExpression) -> cst.BaseExpression | None:
        """The value a model name is built from when that build freezes its parameters
        (``G = build(...).train().requires_grad_(False).to(device)``), else None. Such a
        model needs grad only where the code switches it on (around its backward)."""
        if not isinstance(model, cst.Name):
            return None
        value = self.ctx.get(ValueResolver).assigned_value(model)
        node = value
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "requires_grad_":
                return value if node.args and _is_false(node.args[0].value) else None
            node = node.func.value
        return None

    def _copied_while_frozen(self, obj: AveragingObject) -> bool:
        """The copy was made of a model built frozen (``G = build().requires_grad_(False)``;
        ``ema = deepcopy(G)``) and not unfrozen before the copy: ``deepcopy`` keeps each
        parameter's ``requires_grad``, so later toggles of the model (around its backward)
        leave the copy frozen."""
        value = self.built_frozen(obj.source) if obj.source is not None else None
        if value is None:
            return False
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "requires_grad_"
                and self.index.is_before(value, call)
                and self.index.is_before(call, obj.creation)
                and not (call.args and _is_false(call.args[0].value))
            ):
                return False  # some model is unfrozen between the build and the copy
        return True

    def _over_parameters_of(self, node: cst.CSTNode, obj: AveragingObject) -> bool:
        loop = self.index.enclosing(node, cst.For)
        if not isinstance(loop, cst.For):
            return False
        iterable = loop.iter
        return (
            isinstance(iterable, cst.Call)
            and isinstance(iterable.func, cst.Attribute)
            and iterable.func.attr.value in ("parameters", "named_parameters")
            and self._refer(iterable.func.value, 0) is obj
        )

    # Creation ---------------------------------------------------------------------------------
    def _add(self, obj: AveragingObject, *nodes: cst.CSTNode) -> AveragingObject:
        self.objects.append(obj)
        for node in (obj.creation, *nodes):
            self._by_creation[id(node)] = obj
        return obj

    def _collect_api_objects(self) -> None:
        avg_fns: dict[int, BoundCall] = {}
        for bound in self._bound.calls:
            role = bound.spec.role
            if role is Role.EMA_AVG_FN:
                avg_fns[id(bound.call)] = bound
        consumed: set[int] = set()
        for bound in self._bound.calls:
            spec = bound.spec
            role = spec.role
            if role in _CREATING:
                if role is Role.OPTIMIZER and not self._ema_enabled(bound):
                    continue
                averaging = bound.averaging
                kind = self._kind_of(bound, avg_fns, consumed)
                weight_call = bound if averaging.weight is not None else None
                if spec.role in (Role.SWA_MODEL, Role.SWA_CALLBACK):
                    weight_call = self._avg_fn_of(bound, avg_fns)
                source_param = averaging.source_param
                source = bound.value(source_param) if source_param else None
                made = self._add(
                    AveragingObject(
                        kind,
                        Use.EVAL,
                        bound.call,
                        bound=bound,
                        spec=averaging,
                        weight_call=weight_call,
                        source=source,
                    )
                )
                given = (
                    self._averaging_function_of(bound.call) if spec.role is Role.SWA_MODEL else None
                )
                if given is not None:
                    made.inplace.append(given)
                if spec.role is Role.SWA_MODEL:
                    made.inplace.extend(self._multi_avg_updates(bound))
                self._given_updates.update(id(u) for u in made.inplace)
            elif role is Role.EMA_FUNCTION:
                self._functional(bound)
        for key, bound in avg_fns.items():
            if key not in consumed:
                self._add(
                    AveragingObject(
                        Method.EMA,
                        Use.EVAL,
                        bound.call,
                        bound=bound,
                        spec=bound.spec,
                        weight_call=bound,
                    )
                )

    def _ema_enabled(self, bound: BoundCall) -> bool:
        weight = bound.spec.weight
        if weight is None or weight.enabled_when is None:
            return True
        param, wanted = weight.enabled_when
        expr = bound.value(param)
        if expr is None:
            return False
        value = self.resolver.resolve(expr)
        return value is not None and value.value == wanted

    def _avg_fn_of(self, bound: BoundCall, avg_fns: dict[int, BoundCall]) -> BoundCall | None:
        for param in ("multi_avg_fn", "avg_fn"):
            expr = bound.value(param)
            if expr is None:
                continue
            target = self._follow(expr)
            if target is not None and id(target) in avg_fns:
                return avg_fns[id(target)]
        return None

    def _kind_of(
        self, bound: BoundCall, avg_fns: dict[int, BoundCall], consumed: set[int]
    ) -> Method:
        spec = bound.averaging
        if spec.role in (Role.SWA_MODEL, Role.SWA_CALLBACK):
            if spec.qualname.endswith("StochasticWeightAverage") or spec.short_name == (
                "StochasticWeightAveraging"
            ):
                return Method.SWA
            found: Method | None = None
            for param in ("multi_avg_fn", "avg_fn"):
                expr = bound.value(param)
                if expr is None:
                    continue
                target = self._follow(expr)
                if target is not None and id(target) in avg_fns:
                    consumed.add(id(target))
                    return Method.EMA
                inner = self._bound.bound(target) if target is not None else None
                if inner is not None and inner.spec.role is Role.SWA_AVG_FN:
                    return Method.SWA
                if self._averaging_function_of(bound.call) is not None or (
                    param == "multi_avg_fn" and self._multi_avg_updates(bound)
                ):
                    return Method.EMA  # ``avg_fn=lambda a, m, n: d * a + (1 - d) * m``
                name = dotted_name(expr) or ""
                found = Method.EMA if "ema" in tokens(name) else Method.UNKNOWN
            if found is not None:
                return found
            return Method.SWA if not bound.has_star else Method.UNKNOWN
        return Method.EMA

    def _collect_subclassed_averages(self) -> None:
        """A project subclass of ``AveragedModel`` that hands ``super().__init__`` its own
        ``avg_fn`` (torchvision's ``ExponentialMovingAverage``, whose nested ``ema_avg`` reads
        the ``decay`` given to the class): an average whose decay is written by hand, made
        where that function is, and judged at each construction through the parameter."""
        if not self._may_update():
            return
        for update in self.ctx.get(InPlaceUpdates).updates:
            owner = update.owner
            if owner is None or id(owner) in self._by_creation:
                continue
            cls = self.index.enclosing(owner, cst.ClassDef)
            if not isinstance(cls, cst.ClassDef):
                continue
            obj = AveragingObject(Method.EMA, Use.EVAL, update.node)
            obj.names.append(cls.name.value)
            obj.reasons.append(f"the avg_fn {cls.name.value} hands AveragedModel")
            self._add(obj)

    def _averaging_function_of(self, call: cst.Call) -> InPlaceUpdate | None:
        """The hand-written ``avg_fn`` update ``call`` is given, if any."""
        for update in self.ctx.get(InPlaceUpdates).updates:
            if update.owner is call:
                return update
        return None

    def _multi_avg_updates(self, bound: BoundCall) -> list[InPlaceUpdate]:
        """The in-place updates of the function given as ``multi_avg_fn`` that average its
        second parameter (the live tensors) into its first (the averaged ones): ``def
        multi(avg, cur, n): torch._foreach_lerp_(avg, cur, 1 - decay)``."""
        expr = bound.value("multi_avg_fn")
        if not isinstance(expr, cst.Name):
            return []
        provider = self.ctx.get(InPlaceUpdates)
        function = provider.function_seen_from(bound.call, expr.value)
        if function is None:
            return []
        names = positional_names(function)
        if len(names) < 2:
            return []
        found = []
        for update in provider.updates:
            if not self.index.contains(function, update.node) or update.source is None:
                continue
            shadow = update.shadow_container or container_of(strip_tensor(update.shadow))
            source = update.source_container or container_of(strip_tensor(update.source))
            if (
                isinstance(shadow, cst.Name)
                and shadow.value == names[0]
                and isinstance(source, cst.Name)
                and source.value == names[1]
            ):
                found.append(update)
        return found

    def _follow(self, expr: cst.BaseExpression, depth: int = 0) -> cst.BaseExpression | None:
        """A name to the single expression assigned to it (for averaging functions)."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(expr, cst.Name):
            bindings = self.resolver.bindings_of(expr)
            if bindings and len(bindings) == 1 and bindings[0].kind == "assign":
                value = bindings[0].value
                return self._follow(value, depth + 1) if value is not None else None
            if bindings and len(bindings) == 1 and bindings[0].kind == "param":
                binding = bindings[0]
                function = binding.function
                if isinstance(function, cst.FunctionDef) and binding.param is not None:
                    for call in self.resolver.callers(function):
                        arg = self.resolver.argument_for(function, binding.param, call)
                        if arg is not None:
                            return self._follow(arg, depth + 1)
                    if binding.param.default is not None:
                        return self._follow(binding.param.default, depth + 1)
            return None
        return expr

    def _functional(self, bound: BoundCall) -> None:
        """``optax.incremental_update(new, old, tau)``: the shadow is ``old``."""
        spec = bound.spec
        shadow = bound.value(spec.shadow) if spec.shadow else None
        existing = self._refer(shadow, 0) if shadow is not None else None
        if existing is not None:
            existing.updates.append(bound.call)
            if existing.weight_call is None:
                existing.weight_call = bound
            self._by_creation.setdefault(id(bound.call), existing)
            return
        source_param = spec.source_param
        obj = AveragingObject(
            Method.EMA,
            Use.EVAL,
            bound.call,
            bound=bound,
            spec=spec,
            weight_call=bound,
            source=bound.value(source_param) if source_param else None,
            updates=[bound.call],
        )
        if shadow is not None:
            obj.bindings.append(shadow)
            obj.names.append(self._code(shadow))
        self._add(obj)

    def _collect_shadows(self) -> None:
        """``deepcopy(model)`` copies that are averaged (by name or by in-place updates)."""
        deepcopies = [c for c in self.ctx.nodes(cst.Call) if self._is_deepcopy(c)]
        updates = self.ctx.get(InPlaceUpdates).updates if self._may_update() else []
        containers: list[tuple[InPlaceUpdate, cst.BaseExpression]] = [
            (u, u.shadow_container) for u in updates if u.shadow_container is not None
        ]
        for call in deepcopies:
            outer = self._chain_top(call)
            targets = list(self._assignment_targets(outer))
            names = [self._code(t) for t in targets]
            averaged = any(is_averaged_name(n) for n in names)
            obj = AveragingObject(
                Method.SWA if any("swa" in tokens(n) for n in names) else Method.EMA,
                Use.EVAL,
                outer,
                source=call.args[0].value if call.args else None,
            )
            if not averaged:
                # Kept only if an in-place update named as an average targets it (an unnamed
                # one may be model merging): the pre-filter relies on such a name too.
                self._memo.clear()
                self._by_creation[id(outer)] = obj
                obj.module_copy = True
                hit = False
                for u, c in containers:
                    if self._refer(c, 0) is obj:
                        hit = self._named_average(u, obj)
                    elif self._weights_passed_for(u, c) is obj:
                        if self._named_average(u, obj):
                            hit = True
                        elif self._trained_copy_helper(u, c, obj):
                            self._trained_copy_updates.add(id(u))
                            hit = True
                    if hit:
                        break
                obj.module_copy = False
                del self._by_creation[id(outer)]
                self._memo.clear()
                if not hit:
                    continue
                obj.reasons.append("target of an in-place average update")
            else:
                obj.reasons.append("named as an averaged copy")
            obj.module_copy = True
            self._add(obj, call)
            node: cst.CSTNode = call
            while node is not outer:
                parent = self.index.parent(node)
                if parent is None:
                    break
                node = parent
                self._by_creation[id(node)] = obj
        self._memo.clear()
        # In-place updates of shadows that are not deepcopies (dicts of tensors, lists).
        for update, container in containers:
            if self._refer(container, 0) is None and (
                is_averaged_name(self._code(container))
                or (
                    self._averaging_helper(update)
                    and self._weights_passed_for(update, container) is None
                )
            ):
                obj = AveragingObject(Method.EMA, Use.EVAL, update.node)
                obj.bindings.append(container)
                obj.names.append(self._code(container))
                obj.reasons.append("target of an in-place average update")
                extra: list[cst.CSTNode] = []
                if isinstance(container, cst.Name):
                    bindings = self.resolver.bindings_of(container) or []
                    if len(bindings) == 1 and bindings[0].value is not None:
                        extra.append(bindings[0].value)  # the dict/list the shadow starts as
                    elif len(bindings) == 1 and isinstance(bindings[0].function, cst.FunctionDef):
                        obj.helper = bindings[0].function
                elif _is_self_attribute(container):
                    # ``self.momentum_encoder = base_encoder(...)`` in ``__init__``: the
                    # copy every method's ``self.momentum_encoder`` refers to.
                    assert isinstance(container, cst.Attribute)
                    cls = self.resolver.class_of_self(container)
                    assigned = self.resolver.self_assignments(cls) if cls is not None else {}
                    values = assigned.get(container.attr.value, [])
                    if len(values) == 1 and values[0] is not None:
                        extra.append(values[0])
                self._add(obj, *extra)
                self._memo.clear()
        self._collect_helper_shadows(containers)

    def _collect_helper_shadows(
        self, containers: list[tuple[InPlaceUpdate, cst.BaseExpression]]
    ) -> None:
        """Copies averaged by a helper of the module: ``def accumulate(model1, model2,
        decay): ... p1.mul_(decay).add_(p2, alpha=1 - decay)`` moves its parameter toward
        another model by a decay and its complement (whatever the helper's name), and a
        caller passes it a copy named as averaged (``accumulate(g_ema, generator, decay)``,
        ``g_ema = Generator(...)``): that copy is an average, made where the name is bound
        (through the callers of the function it is a parameter of)."""
        for update, container in containers:
            if not isinstance(container, cst.Name):
                continue
            bindings = self.resolver.bindings_of(container) or []
            if len(bindings) != 1 or bindings[0].kind != "param":
                continue
            binding = bindings[0]
            function, param = binding.function, binding.param
            if not isinstance(function, cst.FunctionDef) or param is None:
                continue
            if self._refer(container, 0) is not None:
                continue  # a caller passes an object already known
            if not (self._decay_between_models(update) or self._named_average(update, None)):
                continue
            for _, argument in self.resolver.arguments_for(function, param):
                if argument is None or not is_averaged_name(self._code(argument)):
                    continue
                if self._refer(argument, 0) is not None:
                    continue  # made by the first caller (the same copy, passed on)
                origin = self._origin(argument)
                obj = AveragingObject(Method.EMA, Use.EVAL, origin or argument)
                obj.reasons.append(f"averaged by {function.name.value}()")
                if isinstance(argument, (cst.Name, cst.Attribute)):
                    obj.bindings.append(argument)
                    obj.names.append(self._code(argument))
                if origin is not None and self._is_module_copy(origin):
                    obj.module_copy = True
                self._add(obj)
                self._memo.clear()

    def _origin(self, node: cst.BaseExpression, depth: int = 0) -> cst.BaseExpression | None:
        """The one expression a name finally stands for: through single assignments, and
        through parameters every in-module caller passes the same thing for (``g_ema`` in
        ``train(..., g_ema)`` called once with ``g_ema = Generator(...)``); None if unknown."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, cst.Attribute) or (
            isinstance(node, cst.Name) and self.resolver.assigned_value(node) is not None
        ):
            value = self.resolver.assigned_value(node)
            if value is None:
                return None
            if isinstance(value, (cst.Name, cst.Attribute)):
                return self._origin(value, depth + 1)
            return value
        if not isinstance(node, cst.Name):
            return None
        bindings = self.resolver.bindings_of(node) or []
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        binding = bindings[0]
        function = binding.function
        if not isinstance(function, cst.FunctionDef) or binding.param is None:
            return None
        found: cst.BaseExpression | None = None
        for _, argument in self.resolver.arguments_for(function, binding.param):
            origin = self._origin(argument, depth + 1) if argument is not None else None
            if origin is None or (found is not None and origin is not found):
                return None
            found = origin
        return found

    def _is_module_copy(self, origin: cst.BaseExpression) -> bool:
        """A ``deepcopy`` at the root of the expression a helper-averaged copy comes from."""
        node: cst.BaseExpression = origin
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            node = node.func.value
        return isinstance(node, cst.Call) and self._is_deepcopy(node)

    def _may_update(self) -> bool:
        """Whether the module may hold in-place averaging updates (a cheap look first)."""
        if self._has_inplace is None:
            self._has_inplace = bool(self.ctx.nodes(cst.Assign)) or any(
                isinstance(c.func, cst.Attribute)
                and (c.func.attr.value in _INPLACE_METHODS or c.func.attr.value[:8] == "_foreach")
                for c in self.ctx.nodes(cst.Call)
            )
        return self._has_inplace

    def _is_deepcopy(self, call: cst.Call) -> bool:
        if not call.args:
            return False
        func = call.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if name != "deepcopy" and name not in self._deepcopy_aliases():
            return False
        names = self.imports.qualified_names(call.func)
        return "copy.deepcopy" in names

    def _deepcopy_aliases(self) -> set[str]:
        """Local names ``deepcopy`` is imported under (``from copy import deepcopy as dc``)."""
        return {
            local for local, targets in self.imports.aliases.items() if "copy.deepcopy" in targets
        }

    def _chain_top(self, call: cst.Call) -> cst.BaseExpression:
        """``deepcopy(m).eval().requires_grad_(False)``: the outermost call of the chain."""
        node: cst.BaseExpression = call
        while True:
            parent = self.index.parent(node)
            if isinstance(parent, cst.Attribute) and parent.value is node:
                grand = self.index.parent(parent)
                if isinstance(grand, cst.Call) and grand.func is parent:
                    node = grand
                    continue
            return node

    def _assignment_targets(self, value: cst.CSTNode) -> Iterator[cst.BaseExpression]:
        node = value
        parent = self.index.parent(node)
        while isinstance(parent, (cst.IfExp, cst.BooleanOperation)):
            node, parent = parent, self.index.parent(parent)
        if isinstance(parent, cst.Assign) and parent.value is node:
            for target in parent.targets:
                if isinstance(target.target, (cst.Name, cst.Attribute)):
                    yield target.target
        elif isinstance(parent, cst.AnnAssign) and parent.value is node:
            if isinstance(parent.target, (cst.Name, cst.Attribute)):
                yield parent.target
        elif isinstance(parent, cst.Return):
            function = self.index.enclosing(parent, cst.FunctionDef)
            if isinstance(function, cst.FunctionDef):
                for call in self.resolver.callers(function):
                    yield from self._assignment_targets(call)

    # References --------------------------------------------------------------------------------
    def _refer(self, node: cst.BaseExpression | None, depth: int) -> AveragingObject | None:
        if node is None or depth > self.MAX_DEPTH:
            return None
        key = id(node)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # cycle guard
        found = self._refer_uncached(node, depth)
        self._memo[key] = found
        return found

    def _refer_uncached(self, node: cst.BaseExpression, depth: int) -> AveragingObject | None:
        direct = self._by_creation.get(id(node))
        if direct is not None:
            return direct
        if isinstance(node, cst.Name):
            bindings = self.resolver.bindings_of(node)
            if not bindings:
                return None
            found: list[AveragingObject] = []
            memo, deep = self._memo, depth + 1 > self.MAX_DEPTH
            for binding in bindings:
                obj: AveragingObject | None = None
                if binding.kind == "assign" and binding.value is not None:
                    # ``_refer`` inlined for a known answer: a name bound in every copy of
                    # a script asks this once per binding per use.
                    key = id(binding.value)
                    if not deep:
                        obj = memo[key] if key in memo else self._refer(binding.value, depth + 1)
                elif binding.kind == "param" and binding.param is not None:
                    obj = self._param(binding, depth)
                elif binding.loop is not None and not deep:
                    obj = self._handed_out(binding, depth)
                if obj is not None and obj not in found:
                    found.append(obj)
            return found[0] if len(found) == 1 else None
        if isinstance(node, cst.Attribute):
            base = self._refer(node.value, depth + 1)
            if base is not None:
                return base if node.attr.value in _INNER else None
            if isinstance(node.value, (cst.Name, cst.Attribute)):
                # ``self.ema`` in a method, or ``trainer.ema`` on an instance of the class.
                if isinstance(node.value, cst.Name) and node.value.value == "self":
                    cls = self.resolver.class_of_self(node)
                else:
                    cls = self.resolver.instance_class(node.value)
                if cls is None:
                    return None
                values = self.resolver.inherited_assignments(cls, node.attr.value)
                if not values and self._inherited:
                    for klass in self.resolver.lineage(cls):
                        inherited = self._inherited.get((id(klass), node.attr.value))
                        if inherited is not None:
                            return inherited
                objs: list[AveragingObject] = []
                for value in values:
                    obj = self._refer(value, depth + 1) if value is not None else None
                    if obj is not None and obj not in objs:
                        objs.append(obj)
                return objs[0] if len(objs) == 1 else None
            return None
        if isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in (
                "to",
                "cuda",
                "cpu",
                "eval",
                "train",
                "requires_grad_",
                "half",
                "float",
                "bfloat16",
            ):
                return self._refer(func.value, depth + 1)
            if isinstance(func, cst.Attribute) and not node.args:
                # ``ema.get()`` of an API that hands out its averaged copy (EDM2).
                base = self._refer(func.value, depth + 1)
                spec = base.spec if base is not None else None
                if spec is not None and spec.copy_getter == func.attr.value:
                    return None if spec.getter_pairs else base
                return None
            if isinstance(func, cst.Name) and depth + 1 <= self.MAX_DEPTH:
                memo = self._memo
                for value in self._returned(func.value):
                    obj = memo[id(value)] if id(value) in memo else self._refer(value, depth + 1)
                    if obj is not None:
                        return obj
            return None
        if isinstance(node, cst.IfExp):
            return self._refer(node.body, depth + 1) or self._refer(node.orelse, depth + 1)
        return None

    def _handed_out(self, binding, depth: int) -> AveragingObject | None:
        """The object whose averaged copy a loop variable takes: ``net`` in ``for net,
        suffix in ema.get():`` (or over a name bound once to ``ema.get()``) when the API's
        getter returns ``(copy, suffix)`` pairs."""
        loop = binding.loop
        sequence: cst.BaseExpression | None = loop.iter
        for _ in range(3):
            if not isinstance(sequence, cst.Name):
                break
            bound = self.resolver.bindings_of(sequence) or []
            if len(bound) != 1 or bound[0].kind != "assign":
                return None
            sequence = bound[0].value
        if not isinstance(sequence, cst.Call) or sequence.args:
            return None
        func = sequence.func
        if not isinstance(func, cst.Attribute):
            return None
        base = self._refer(func.value, depth + 1)
        spec = base.spec if base is not None else None
        if spec is None or spec.copy_getter != func.attr.value:
            return None
        if spec.getter_pairs:
            return base if binding.slot == 0 else None
        return None

    def _param(self, binding, depth: int) -> AveragingObject | None:
        function = binding.function
        if not isinstance(function, cst.FunctionDef):
            return None
        if depth + 1 <= self.MAX_DEPTH:
            memo = self._memo
            for _, arg in self.resolver.arguments_for(function, binding.param):
                if arg is None:
                    continue
                obj = memo[id(arg)] if id(arg) in memo else self._refer(arg, depth + 1)
                if obj is not None:
                    return obj
        return self._by_creation.get(id(binding.param))

    # Parameters known to be averaging objects ------------------------------------------------
    def _collect_parameters(self) -> None:
        """Parameters that hold an averaging object, on positive evidence only: an annotation
        naming an averaging API or project class (``model_ema: Optional[ModelEmaV2]``), a
        call from another module of the project passing one, or an averaged name used the way
        only an averaging object is (``model_ema.update(model)``). Parameters an in-module
        caller passes an object for are found through the caller instead."""
        project = self.ctx.project
        uses = self._parameter_uses()
        for function in self.ctx.nodes(cst.FunctionDef):
            assert isinstance(function, cst.FunctionDef)
            params = function.params
            for param in all_params(params):
                name = param.name.value
                if name in ("self", "cls"):
                    continue
                spec, reason = self._annotated(param)
                calls = uses.get((id(function), name), [])
                averaged = is_averaged_name(name)
                if reason is None and not calls and not averaged:
                    continue
                if self._passed_locally(function, param):
                    continue
                if reason is None and project is not None and not _plain_value(param):
                    found = project.parameter(function, param)
                    if found is not None:
                        spec, evidence = found
                        reason = evidence.what
                        project.note(name, evidence, function)
                if reason is None and calls and averaged:
                    reason = f"{name} is used as an averaging object ({calls[0][1]}())"
                if reason is None:
                    continue
                obj = AveragingObject(Method.EMA, Use.EVAL, param, spec=spec)
                obj.names.append(name)
                obj.bindings.append(param.name)
                obj.reasons.append(reason)
                for call, method in calls:
                    if (
                        method in ("update", "update_parameters", "step")
                        and call not in obj.updates
                    ):
                        obj.updates.append(call)
                self._add(obj)

    def _collect_inherited(self) -> None:
        """``self.x`` read in a class of this module that neither it nor its bases here
        assign, where another module of the project says what it is: a base class there sets
        it to an averaging object in its ``__init__`` (the hook here updates it), or a
        subclass there does and this class's own methods update it (a base class's hook)."""
        project = self.ctx.project
        if project is None:
            return
        unresolved = self._unresolved_self_attributes()
        for cls, attrs in unresolved:
            found = []
            for base in cls.bases:
                for qualname in self.imports.qualified_names(base.value)[:1]:
                    found.extend(project.inherited_attributes(qualname))
            if self.index.enclosing(cls, cst.ClassDef, cst.FunctionDef) is None:
                found.extend(project.subclass_attributes(cls.name.value, list(attrs)))
            kinds: dict[str, list] = {}
            for item in found:
                if item.attr in attrs and not any(
                    other.evidence.what == item.evidence.what for other in kinds.get(item.attr, [])
                ):
                    kinds.setdefault(item.attr, []).append(item)
            for attr, items in kinds.items():
                if len(items) != 1:
                    continue  # subclasses that set different objects: not one answer
                item = items[0]
                spec = item.spec
                obj = AveragingObject(
                    Method(item.kind),
                    spec_use(spec) if spec is not None else Use.EVAL,
                    cls.name,
                    spec=spec,
                )
                name = f"self.{attr}"
                obj.names.append(name)
                obj.reasons.append(item.evidence.what)
                project.note(name, item.evidence, cls)
                self._inherited[(id(cls), attr)] = obj
                self._add(obj)

    def _unresolved_self_attributes(self) -> list[tuple[cst.ClassDef, dict[str, bool]]]:
        """Classes whose methods read ``self.x`` that no class of their lineage here
        assigns and that is named as an average or used as one (``self.ema.update()``),
        with whether it is used so."""
        by_class: dict[int, tuple[cst.ClassDef, dict[str, bool]]] = {}
        averaged: dict[str, bool] = {}
        for node in self.ctx.nodes(cst.Attribute):
            value = node.value
            if not (isinstance(value, cst.Name) and value.value == "self"):
                continue
            attr = node.attr.value
            parent = self.index.parent(node)
            called = False
            if isinstance(parent, cst.Attribute) and parent.value is node:
                above = self.index.parent(parent)
                called = (
                    isinstance(above, cst.Call)
                    and above.func is parent
                    and parent.attr.value in _PARAMETER_USES
                )
            # Only what could be an average is asked of other modules (each question may
            # summarise a module): a name that says so, or a use only an average has.
            if not called:
                named = averaged.get(attr)
                if named is None:
                    named = averaged[attr] = is_averaged_name(attr)
                if not named:
                    continue
            cls = self.resolver.class_of_self(node)
            if cls is None or not cls.bases:
                continue
            entry = by_class.setdefault(id(cls), (cls, {}))
            entry[1][attr] = entry[1].get(attr, False) or called
        found = []
        for cls, attrs in by_class.values():
            free = {
                attr: called
                for attr, called in attrs.items()
                if not self.resolver.inherited_assignments(cls, attr)
            }
            if free:
                found.append((cls, free))
        return found

    def _annotated(self, param: cst.Param) -> tuple[ApiSpec | None, str | None]:
        annotation = param.annotation
        if annotation is None:
            return None, None
        project = self.ctx.project
        nodes = [
            annotation.annotation,
            *self.index.descendants(annotation, cst.Attribute),
            *self.index.descendants(annotation, cst.Name),
        ]
        for node in nodes:
            for qualname in self.imports.qualified_names(node):
                spec = API_TABLE.get(qualname)
                if spec is None and project is not None:
                    spec = project.spec_for(qualname)
                if spec is not None and spec.role in _CREATING:
                    return spec, f"annotated as {spec.short_name}"
        return None, None

    def _passed_locally(self, function: cst.FunctionDef, param: cst.Param) -> bool:
        for call in self.resolver.callers(function):
            arg = self.resolver.argument_for(function, param, call)
            if arg is not None and self._refer(arg, 1) is not None:
                return True
        return False

    def _parameter_uses(self) -> dict[tuple[int, str], list[tuple[cst.Call, str]]]:
        """``p.update(model)``-style calls on a bare name, by (function, name): uses only an
        averaging object has (the argument is a model or its parameters, never a number)."""
        found: dict[tuple[int, str], list[tuple[cst.Call, str]]] = {}
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Name):
                continue
            method = func.attr.value
            if method not in _PARAMETER_USES:
                continue
            if method in ("update", "update_parameters", "step") and (
                not call.args or not _model_like(call.args[0].value)
            ):
                continue
            function = self.index.enclosing(call, cst.FunctionDef)
            if function is None:
                continue
            found.setdefault((id(function), func.value.value), []).append((call, method))
        return found

    def _local_functions(self, name: str) -> list[cst.FunctionDef]:
        return [
            f
            for f in self.index.functions_named(name)
            if self.index.enclosing(f, cst.ClassDef, cst.FunctionDef) is None
        ]

    def _returned(self, name: str) -> list[cst.BaseExpression]:
        """What the module-level functions ``name`` return (their own ``return`` values, in
        order): read once per name, not once per call of it."""
        found = self._returns.get(name)
        if found is None:
            found = self._returns[name] = [
                ret.value
                for function in self._local_functions(name)
                for ret in self.index.descendants(function, cst.Return)
                if isinstance(ret, cst.Return)
                and ret.value is not None
                and self.index.enclosing(ret, cst.FunctionDef) is function
            ]
        return found

    # Bindings and updates ---------------------------------------------------------------------
    def _link_bindings(self) -> None:
        self._memo.clear()
        for node in (*self.ctx.nodes(cst.Assign), *self.ctx.nodes(cst.AnnAssign)):
            value = node.value
            if value is None:
                continue
            obj = self._refer(value, 0)
            if obj is None:
                continue
            targets = (
                [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            )
            for target in targets:
                if isinstance(target, (cst.Name, cst.Attribute)):
                    code = self._code(target)
                    if code not in obj.names:
                        obj.names.append(code)
                        obj.bindings.append(target)

    def _link_updates(self) -> None:
        methods: set[str] = {"update_parameters"}
        for obj in self.objects:
            if obj.spec is not None:
                methods.update(obj.spec.update_methods)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in methods:
                referred = self._refer(func.value, 0)
                # ``self.ema = ModelEMA(model)`` made again on resume: the attribute holds
                # one of the copies, made by the same API, and the call updates it.
                targets = [referred] if referred is not None else []
                for obj in targets or self._same_api_attribute(func.value):
                    known = obj.spec is None or func.attr.value in obj.spec.update_methods
                    if known and call not in obj.updates:
                        obj.updates.append(call)
            elif isinstance(func, (cst.Name, cst.Attribute)) and not self._by_creation.get(
                id(call)
            ):
                obj = self._refer(func, 0)
                if (
                    obj is not None
                    and obj.spec is not None
                    and ("__call__" in obj.spec.update_methods)
                ):
                    obj.updates.append(call)
        self._link_helper_updates()
        if self._may_update():
            for update in self.ctx.get(InPlaceUpdates).updates:
                if id(update) in self._given_updates:
                    continue  # the ``avg_fn`` of an ``AveragedModel``: linked at creation
                container = update.shadow_container
                target = container if container is not None else strip_tensor(update.shadow)
                shadow = container_of(target)
                passed = self._passed_by_callers(shadow)
                if passed is not None:
                    # A helper given different copies (or a copy and a plain model): each
                    # copy is updated where a call passes it, not wherever the helper runs.
                    for call, obj in passed:
                        if update not in obj.inplace:
                            obj.inplace.append(update)
                        if call not in obj.updates:
                            obj.updates.append(call)
                    continue
                obj = self._refer(shadow, 0)
                if obj is None:
                    # ``def blend(xs, ys, k)`` called with ``ema.parameters()`` per step.
                    obj = self._weights_passed_for(update, shadow)
                if obj is None:
                    # ``def ema_update(ema_params, params, decay)`` that no caller here hands
                    # a known object: the shadow the update itself made (its parameter).
                    obj = self._by_creation.get(id(update.node))
                if obj is not None:
                    obj.inplace.append(update)
                    if update.node not in obj.updates:
                        obj.updates.append(update.node)
        for target, _ in self._attribute_writes():
            if target.attr.value in _WEIGHT_ATTRIBUTES:
                obj = self._refer(target.value, 0)
                if obj is not None:
                    obj.weight_reassigned = True
                    obj.reasons.append(f"{self._code(target)} is assigned after construction")

    def _same_api_attribute(self, node: cst.BaseExpression) -> list[AveragingObject]:
        """The objects ``self.x`` (or ``instance.x``) is assigned in the methods of its
        class, when there are several and one API made them all (a copy made again when a
        run resumes); empty otherwise."""
        if not isinstance(node, cst.Attribute) or not isinstance(node.value, cst.Name):
            return []
        if node.value.value == "self":
            cls = self.resolver.class_of_self(node)
        else:
            cls = self.resolver.instance_class(node.value)
        if cls is None:
            return []
        found: list[AveragingObject] = []
        for value in self.resolver.inherited_assignments(cls, node.attr.value):
            if value is None or (isinstance(value, cst.Name) and value.value == "None"):
                continue
            obj = self._refer(value, 1)
            if obj is None or obj.spec is None:
                return []
            if obj not in found:
                found.append(obj)
        if len(found) < 2 or len({o.spec.qualname for o in found if o.spec}) != 1:
            return []
        return found

    def _weights_passed_for(
        self, update: InPlaceUpdate, shadow: cst.BaseExpression
    ) -> AveragingObject | None:
        """For an update looping over ``shadow``, a parameter of its function (``def
        blend(xs, ys, k): for x, y in zip(xs, ys)``): the one averaging object whose weights
        every in-module call passes for it, each call inside a loop (a per-step update; a
        one-off call is a merge or a sync); None otherwise."""
        if update.loop is None or update.shadow_container is not shadow:
            return None
        if not isinstance(shadow, cst.Name) or update.source_container is None:
            return None
        if any(w in NOT_WEIGHT_TOKENS for w in tokens(self._code(update.source_container))):
            return None  # ``def step(xs, grads, lr)``: an optimizer's step, not an average
        bindings = self.resolver.bindings_of(shadow) or []
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        function, param = bindings[0].function, bindings[0].param
        if not isinstance(function, cst.FunctionDef) or param is None:
            return None
        found: AveragingObject | None = None
        for call, argument in self.resolver.arguments_for(function, param):
            if argument is None or not self._in_loop(call):
                return None
            obj = self._passed_object(argument, 1)
            if obj is None or (found is not None and obj is not found):
                return None
            found = obj
        return found

    def _passed_by_callers(
        self, shadow: cst.BaseExpression
    ) -> list[tuple[cst.Call, AveragingObject]] | None:
        """When ``shadow`` is a parameter of a function whose in-module callers do not all
        pass the same averaging object for it, the calls that pass one, with the object;
        None otherwise (not a parameter, no callers, or one object from every caller)."""
        if not isinstance(shadow, cst.Name):
            return None
        bindings = self.resolver.bindings_of(shadow) or []
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        function, param = bindings[0].function, bindings[0].param
        if not isinstance(function, cst.FunctionDef) or param is None:
            return None
        passed = [
            (call, self._refer(argument, 1) if argument is not None else None)
            for call, argument in self.resolver.arguments_for(function, param)
        ]
        objects = {id(obj) for _, obj in passed}
        if len(objects) < 2:
            return None
        return [(call, obj) for call, obj in passed if obj is not None]

    def _link_helper_updates(self) -> None:
        """``update_ema(ema, model, decay=...)``: a call of a function the module imports
        (its body is in another file) whose name says it updates an average, given a
        hand-made average: an update of that average where it is called."""
        local = {fn.name.value for fn in self.ctx.nodes(cst.FunctionDef)}
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            name = func.value if isinstance(func, cst.Name) else None
            if isinstance(func, cst.Attribute):
                name = func.attr.value
            if name is None or name in local or not _updates_an_average(name):
                continue
            for arg in call.args[:2]:
                obj = self._refer(arg.value, 0)
                if obj is not None and obj.spec is None:
                    if call not in obj.updates:
                        obj.updates.append(call)
                    break

    def _attribute_writes(self) -> Iterator[tuple[cst.Attribute, cst.CSTNode]]:
        for node in self.ctx.nodes(cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Attribute):
                    yield target.target, node
        for node in self.ctx.nodes(cst.AugAssign):
            if isinstance(node.target, cst.Attribute):
                yield node.target, node

    # Classification -----------------------------------------------------------------------------
    def _classify(self, obj: AveragingObject) -> None:
        spec = obj.spec
        if spec is not None and spec.role is Role.GRADIENT_EMA:
            obj.use = Use.NOT_WEIGHTS
            obj.reasons.append(f"{spec.short_name} averages gradients, not weights")
            return
        names = list(obj.names)
        for name in names:
            if any(w in NOT_WEIGHT_TOKENS for w in tokens(name)):
                obj.use = Use.NOT_WEIGHTS
                obj.reasons.append(f"{name} names a loss or metric average")
                return
        is_tf = spec is not None and spec.qualname == "tf.train.ExponentialMovingAverage"
        if is_tf and self._averages_losses(obj):
            obj.use = Use.NOT_WEIGHTS
            obj.reasons.append("apply() is given losses or metrics")
            return
        if obj.helper is not None:
            # ``update_ema(target_params, source_params, rate)``: a helper's parameter is
            # named for the helper's arithmetic, not for its use; an RL rate (``tau``) or a
            # teacher's momentum among the helper's names says what it is for.
            helper = obj.helper
            words = " ".join((helper.name.value, *(p.name.value for p in all_params(helper))))
            obj.use = named_use(Use.EVAL, words)
            obj.reasons.append(f"averaged by {helper.name.value}()")
            return
        for name in names:
            named = use_from_name(name)
            if named is not None:
                obj.use = named
                obj.reasons.append(f"named {name}")
                return
        weight = obj.weight_call
        if weight is not None and weight.averaging.weight is not None:
            expr = weight.value(weight.averaging.weight.param)
            text = self._code(expr).lower() if expr is not None else ""
            if "tau" in text or "polyak" in text:
                obj.use = Use.TARGET
                obj.reasons.append("weighted by tau/polyak")
                return
            if "teacher" in text or "momentum_schedule" in text:
                obj.use = Use.TEACHER
                obj.reasons.append("weighted by a teacher momentum")
                return
        if self._feeds_training_loss(obj):
            obj.use = Use.TEACHER
            obj.reasons.append("its output feeds a loss that is backpropagated")
            return
        if (
            spec is not None
            and spec.default_use not in ("eval", "teacher")
            and any(is_averaged_name(n) for n in names)
        ):
            obj.use = Use.EVAL
            obj.reasons.append("named as an averaged copy")
            return
        obj.use = spec_use(spec) if spec is not None else Use.EVAL

    def _averages_losses(self, obj: AveragingObject) -> bool:
        for update in obj.updates:
            if isinstance(update, cst.Call):
                for arg in update.args:
                    text = self._code(arg.value).lower()
                    if any(w in text for w in ("loss", "metric", "acc")):
                        return True
        return False

    def loss_inputs(self, obj: AveragingObject) -> list[cst.Call]:
        """The calls of the object whose output flows into a loss in a function that
        backpropagates (what makes an object a teacher when nothing else names it)."""
        found = []
        for call in self._forward_calls(obj):
            function = self.index.enclosing(call, cst.FunctionDef)
            if function is None or not self._backpropagates(function):
                continue
            if self._into_loss(call, function):
                found.append(call)
        return found

    def _feeds_training_loss(self, obj: AveragingObject) -> bool:
        """The object is called and the output flows into a loss in a function that
        backpropagates (a teacher), not only into validation code."""
        for call in self._forward_calls(obj):
            function = self.index.enclosing(call, cst.FunctionDef)
            if function is None or not self._backpropagates(function):
                continue
            if self._into_loss(call, function):
                return True
        return False

    def _forward_calls(self, obj: AveragingObject) -> Iterator[cst.Call]:
        update_ids = {id(u) for u in obj.updates}
        for call in self._calls_by_object().get(id(obj), []):
            if id(call) in update_ids or id(call) == id(obj.creation):
                continue
            yield call

    def _calls_by_object(self) -> dict[int, list[cst.Call]]:
        """Calls of each object (``ema(x)``, ``ema.forward(x)``), grouped in one pass."""
        found = self._called
        if found is None:
            found = self._called = {}
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value in (
                    "forward",
                    "forward_eval",
                    "__call__",
                ):
                    func = func.value
                if not isinstance(func, (cst.Name, cst.Attribute)):
                    continue
                obj = self._refer(func, 0)
                if obj is not None:
                    found.setdefault(id(obj), []).append(call)
        return found

    def _backpropagates(self, function: cst.FunctionDef) -> bool:
        if function.name.value in ("training_step", "train_step", "forward_train"):
            return True
        for call in self.index.descendants(function, cst.Call):
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value in ("backward", "manual_backward")
            ):
                return True
        return False

    def _into_loss(self, call: cst.Call, function: cst.FunctionDef) -> bool:
        # Directly an argument of a loss call.
        for ancestor in self.index.ancestors(call):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.Call) and ancestor is not call:
                name = dotted_name(ancestor.func) or ""
                if _LOSS_CALL.search(name):
                    return True
        # Assigned to a name that a loss call in the same function reads.
        statement = self.index.statement(call)
        assigned: set[str] = set()
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        for name in self.index.descendants(target, cst.Name):
                            assigned.add(name.value)  # type: ignore[attr-defined]
                        if isinstance(target.target, cst.Name):
                            assigned.add(target.target.value)
        if not assigned:
            return False
        for other in self.index.descendants(function, cst.Call):
            if not isinstance(other, cst.Call):
                continue
            name = dotted_name(other.func) or ""
            if not _LOSS_CALL.search(name):
                continue
            for arg in other.args:
                inner = {n.value for n in self.index.descendants(arg, cst.Name)}  # type: ignore[attr-defined]
                if isinstance(arg.value, cst.Name):
                    inner.add(arg.value.value)
                if inner & assigned:
                    return True
        return False

    def _code(self, node: cst.CSTNode | None) -> str:
        return "" if node is None else cst.Module([]).code_for_node(node)


def _updates_an_average(name: str) -> bool:
    """``update_ema``, ``ema_update``, ``update_moving_average``: a helper's name that says
    it moves an average towards the weights."""
    words = [w.lower() for w in tokens(name)]
    return "update" in words and any(w in ("ema", "average", "averages") for w in words)


def _is_self_attribute(node: cst.BaseExpression) -> bool:
    return (
        isinstance(node, cst.Attribute)
        and isinstance(node.value, cst.Name)
        and node.value.value == "self"
    )
