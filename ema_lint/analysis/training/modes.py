"""Train/eval mode of an averaged copy along the path that reaches a point of the code.

``nn.Module`` copies inherit their mode: ``copy.deepcopy(model)`` and ``AveragedModel``
(and ema-pytorch, mmengine, the copies EDM2's ``PowerFunctionEMA.get()`` hands out) start
in the online model's mode, usually train; timm,
ultralytics and EDM-style ``deepcopy(net).eval()`` copies start in eval. The mode then
changes by ``.eval()`` / ``.train()`` on the copy (or its inner model), by a parent
module's ``.train()`` / ``.eval()`` when the copy is a registered child, by a local helper
that does one of those, and by Lightning, which runs validation hooks with the module in
eval mode and training hooks in train mode.

``mode_at(obj, node)`` walks back from ``node``: the statements before it in its block,
then the enclosing blocks, a loop's previous iteration (the statements after ``node`` in
the loop body), and, at the top of a function, each call site of the function (or the
mode a framework enters a hook with). The first event found decides; a path the walk cannot
follow gives ``Mode.UNKNOWN``, which rules treat as "do not report".

``live_mode_at(model, node)`` asks the same of a live model that is not an averaged copy
(the one averaged weights are swapped into), but counts only what the code says: the
``.train()`` / ``.eval()`` calls on it (or on its inner ``module``), those of the local
functions it is passed to, and, for ``self.model``, those of the methods of the same
class. A path that reaches the top of the code without meeting one gives
``Mode.UNKNOWN``: a freshly built model is in train mode, but whether it is still in it
when evaluated depends on code the walk cannot see.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterator

import libcst as cst

from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import dotted_name
from ema_lint.analysis.training.framework import FrameworkHooks
from ema_lint.analysis.training.loops import TrainingLoops


class Mode(str, enum.Enum):
    TRAIN = "train"
    EVAL = "eval"
    UNKNOWN = "unknown"


_TRAIN_HOOKS = ("training_step", "on_train_", "on_before_", "on_after_", "optimizer_step")
_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def _mode_of_call(call: cst.Call) -> Mode | None:
    """``x.eval()`` -> EVAL, ``x.train()`` / ``x.train(True)`` -> TRAIN, ``x.train(False)``
    -> EVAL; None for anything else."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    if func.attr.value == "eval" and not call.args:
        return Mode.EVAL
    if func.attr.value != "train":
        return None
    if not call.args:
        return Mode.TRAIN
    value = call.args[0].value
    if isinstance(value, cst.Name) and value.value in ("True", "False"):
        return Mode.TRAIN if value.value == "True" else Mode.EVAL
    return Mode.UNKNOWN


def _built_in_mode(statement: cst.CSTNode, code: str) -> Mode | None:
    """``net = Net().to(device).eval()``: the mode the chain that builds ``code`` ends in."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return None
    for small in statement.body:
        if not isinstance(small, cst.Assign) or not any(
            dotted_name(t.target) == code for t in small.targets
        ):
            continue
        node: cst.BaseExpression = small.value
        while isinstance(node, cst.Call):
            mode = _mode_of_call(node)
            if mode is not None:
                return mode
            func = node.func
            node = func.value if isinstance(func, cst.Attribute) else func
    return None


def _same_model(receiver: str, code: str) -> bool:
    """A mode call on ``receiver`` sets the mode of the model ``code`` names: the same
    name, or one holding the other (``model.module.eval()`` for ``model``). A bare
    ``self.train()`` is not counted: in a trainer class it is the training routine."""
    if receiver == "self":
        return False
    return receiver == code or receiver.startswith(code + ".") or code.startswith(receiver + ".")


class ModeTracker:
    """Where the mode of each averaged model copy is set, and its mode at a point."""

    MAX_DEPTH = 4

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.objects = ctx.get(AveragingObjects)
        self.loops = ctx.get(TrainingLoops)
        self.hooks = ctx.get(FrameworkHooks)
        # Mode calls on an object, by the id of the call.
        self._direct: dict[int, list[tuple[AveragingObject, Mode]]] = {}
        # Mode calls on a parameter: (function id, parameter name) -> [(call, mode)].
        self._param_events: dict[tuple[int, str], list[tuple[cst.Call, Mode]]] = {}
        self._parents: dict[int, list[AveragingObject]] = {}  # class id -> registered copies
        self._parent_codes: dict[str, list[AveragingObject]] = {}  # "model" in model.ema
        self._function_modes: dict[tuple[int, int], Mode | None] = {}
        self._candidate_calls: tuple[list[int], list[cst.Call]] | None = None
        self._sibling_starts: dict[int, list[int]] = {}  # block id -> its statements' orders
        self._collect_parents()
        for call in ctx.nodes(cst.Call):
            mode = _mode_of_call(call)
            if mode is None:
                continue
            receiver = call.func.value  # type: ignore[attr-defined]
            param = self._parameter_root(receiver, call)
            if param is not None:
                fn, name = param
                self._param_events.setdefault((id(fn), name), []).append((call, mode))
                continue
            for obj in self._receivers(receiver, call):
                self._direct.setdefault(id(call), []).append((obj, mode))

    @classmethod
    def build(cls, ctx: FileContext) -> ModeTracker:
        return cls(ctx)

    # Public ---------------------------------------------------------------------------------
    def tracked(self, obj: AveragingObject) -> bool:
        """The object holds a model copy that has a mode (not a set of tensors): an API
        object with a model inside or handing one out (EDM2 ``ema.get()``), or a
        hand-made ``deepcopy``."""
        if obj.hand_made:
            return isinstance(obj.creation, cst.Call) and not any(
                u is obj.creation for u in obj.updates
            )
        spec = obj.spec
        return spec is not None and (spec.model_copy is not None or spec.copy_getter is not None)

    def initial_mode(self, obj: AveragingObject) -> Mode:
        """The mode the copy has when it is created."""
        spec = obj.spec
        if spec is not None and spec.eval_on_init:
            return Mode.EVAL
        creation = obj.creation
        # deepcopy(model).eval().requires_grad_(False): the chain decides.
        node: cst.CSTNode = creation
        while isinstance(node, cst.Call):
            mode = _mode_of_call(node)
            if mode is not None:
                return mode
            func = node.func
            node = func.value if isinstance(func, cst.Attribute) else func
        return self._source_mode(obj)

    def is_event(self, call: cst.Call, obj: AveragingObject) -> Mode | None:
        """The mode ``call`` sets on ``obj`` itself (not through a helper), if any."""
        for found, mode in self._direct.get(id(call), []):
            if found is obj:
                return mode
        return None

    def registered_in(self, obj: AveragingObject) -> list[cst.ClassDef]:
        """Classes that hold the copy as a child module (``self.ema = deepcopy(...)``)."""
        return [c for c in self.ctx.nodes(cst.ClassDef) if obj in self._parents.get(id(c), [])]

    def mode_at(self, obj: AveragingObject, node: cst.CSTNode) -> Mode:
        """The copy's mode when ``node`` runs."""
        return self._walk(obj, node, 0, set())

    # Parents ----------------------------------------------------------------------------------
    def _is_module(self, obj: AveragingObject) -> bool:
        return obj.hand_made or (obj.spec is not None and obj.spec.is_module)

    def _collect_parents(self) -> None:
        for obj in self.objects.objects:
            if not self._is_module(obj):
                continue
            for binding in obj.bindings:
                if not isinstance(binding, cst.Attribute):
                    continue
                owner = dotted_name(binding.value)
                if owner is None:
                    continue
                if owner == "self":
                    cls = self.index.enclosing(binding, cst.ClassDef)
                    if isinstance(cls, cst.ClassDef) and cls.bases:
                        self._parents.setdefault(id(cls), []).append(obj)
                else:
                    self._parent_codes.setdefault(owner, []).append(obj)

    def _receivers(self, receiver: cst.BaseExpression, call: cst.Call) -> list[AveragingObject]:
        obj = self.objects.for_expression(receiver)
        if obj is not None:
            return [obj]
        code = dotted_name(receiver)
        if code == "self":
            cls = self.index.enclosing(call, cst.ClassDef)
            return list(self._parents.get(id(cls), [])) if cls is not None else []
        found = list(self._parent_codes.get(code or "", []))
        if isinstance(receiver, cst.Name):
            cls = self.instance_class(receiver)
            if cls is not None:
                found.extend(self._parents.get(id(cls), []))
        return found

    def instance_class(self, name: cst.Name) -> cst.ClassDef | None:
        """The module's class ``name`` is an instance of (``model = Net(); model.train()``)."""
        from ema_lint.analysis.syntax.values import ValueResolver

        cache: dict[int, cst.ClassDef | None] = self.__dict__.setdefault("_instances", {})
        if id(name) in cache:
            return cache[id(name)]
        cache[id(name)] = None
        bindings = self.ctx.get(ValueResolver).bindings_of(name) or []
        for binding in bindings:
            value = binding.value
            if isinstance(value, cst.Call) and isinstance(value.func, cst.Name):
                for cls in self.ctx.nodes(cst.ClassDef):
                    if cls.name.value == value.func.value:  # type: ignore[attr-defined]
                        cache[id(name)] = cls  # type: ignore[assignment]
                        return cls  # type: ignore[return-value]
        return None

    def _parameter_root(
        self, receiver: cst.BaseExpression, call: cst.Call
    ) -> tuple[cst.FunctionDef, str] | None:
        """``net`` in ``net.eval()`` when ``net`` is a parameter of the enclosing function."""
        node = receiver
        while isinstance(node, cst.Attribute):
            node = node.value
        if not isinstance(node, cst.Name) or node.value == "self":
            return None
        fn = self.loops.function_of(call)
        if fn is None:
            return None
        names = {p.name.value for p in (*fn.params.params, *fn.params.kwonly_params)}
        names.update(p.name.value for p in fn.params.posonly_params)
        return (fn, node.value) if node.value in names else None

    def param_sets_mode(self, fn: cst.FunctionDef, param: str) -> Mode | None:
        """The last mode ``fn`` sets on its parameter ``param`` (``net.eval()``), if any."""
        events = self._param_events.get((id(fn), param), [])
        return events[-1][1] if events else None

    # Walking back -----------------------------------------------------------------------------
    def _walk(self, obj: AveragingObject, node: cst.CSTNode, depth: int, seen: set[int]) -> Mode:
        current: cst.CSTNode | None = self.index.statement(node)
        while current is not None:
            container = self.index.parent(current)
            siblings: list[cst.CSTNode] = []
            if isinstance(container, (cst.IndentedBlock, cst.Module)):
                siblings = self._siblings_before(container, current, obj)
            for sibling in siblings:
                mode = self._last_event(sibling, obj, depth)
                if mode is not None:
                    return mode
            owner = self._owner(current)
            if owner is None:
                return Mode.UNKNOWN  # module level: the copy was made further down
            if isinstance(owner, cst.FunctionDef):
                return self._entry(obj, owner, depth, seen)
            if isinstance(owner, cst.Lambda):
                return Mode.UNKNOWN
            # In a loop, the previous iteration ran the rest of the body first.
            if (
                isinstance(owner, (cst.For, cst.While))
                and self.index.contains(owner.body, node)
                and self._last_event_after(owner, node, obj, depth) is Mode.TRAIN
            ):
                return Mode.TRAIN
            if isinstance(owner, cst.Try) and not self.index.contains(owner.body, node):
                mode = self._last_event(owner.body, obj, depth)
                if mode is not None:
                    return mode
            current = owner
        return Mode.UNKNOWN

    def _owner(self, statement: cst.CSTNode) -> cst.CSTNode | None:
        """The compound statement or function around ``statement`` (None at module level)."""
        for ancestor in self.index.ancestors(statement):
            if isinstance(ancestor, (cst.BaseCompoundStatement, cst.Lambda)):
                return ancestor
            if isinstance(ancestor, cst.Module):
                return None
        return None

    def _entry(self, obj: AveragingObject, fn: cst.FunctionDef, depth: int, seen: set[int]) -> Mode:
        """The mode when ``fn`` starts: from its call sites, or the framework's contract."""
        if self.hooks.lightning_hook(fn):
            cls = self.loops.class_of(fn)
            # Lightning switches the LightningModule (and its children) between train and
            # eval; a callback's own attributes keep whatever mode the code gives them.
            if (
                cls is not None
                and self.hooks.is_lightning_module(cls)
                and obj in self._parents.get(id(cls), [])
            ):
                if self.hooks.is_eval_hook(fn):
                    return Mode.EVAL
                if fn.name.value.startswith(_TRAIN_HOOKS):
                    return Mode.TRAIN
            return self._unreached(obj, fn)
        callers = self.loops.callers(fn)
        if not callers or depth >= self.MAX_DEPTH or id(fn) in seen:
            return self._unreached(obj, fn)
        seen = seen | {id(fn)}
        modes = {self._walk(obj, call, depth + 1, seen) for call in callers}
        if Mode.TRAIN in modes:
            return Mode.TRAIN
        if modes == {Mode.EVAL}:
            return Mode.EVAL
        return Mode.UNKNOWN

    def _unreached(self, obj: AveragingObject, fn: cst.FunctionDef | None = None) -> Mode:
        """A path the walk cannot follow further up, from the start of ``fn``: the copy is
        in its initial mode (or the mode the ``__init__`` that made it leaves it in) only if
        nothing else in the module changes its mode. Events inside ``fn`` itself were
        already met on the way back."""
        creation_fn = self.loops.function_of(obj.creation)
        baseline = self.initial_mode(obj)
        skip = [f for f in (fn,) if f is not None]
        if creation_fn is not None and creation_fn.name.value == "__init__":
            skip.append(creation_fn)
            after_init = self._last_event(creation_fn.body, obj, 0)
            if after_init is not None:
                baseline = after_init

        def outside(node: cst.CSTNode) -> bool:
            return not any(self.index.contains(f, node) for f in skip)

        for key, events in self._direct.items():
            if any(o is obj for o, _ in events):
                call = self._calls_by_id().get(key)
                if call is None or outside(call):
                    return Mode.UNKNOWN
        for fn_id, param in self._param_events:
            helper = next((f for f in self.loops.functions if id(f) == fn_id), None)
            if helper is None:
                continue
            for call in self.loops.callers(helper):
                if not outside(call):
                    continue
                for position, arg in enumerate(call.args):
                    if self.param_name(helper, arg, position) != param:
                        continue
                    if self.objects.for_expression(arg.value) is obj:
                        return Mode.UNKNOWN
        return baseline

    def _calls_by_id(self) -> dict[int, cst.Call]:
        found = getattr(self, "_by_id", None)
        if found is None:
            found = self._by_id = {id(c): c for c in self.ctx.nodes(cst.Call)}
        return found

    # Events inside a statement ----------------------------------------------------------------
    def _calls(self, node: cst.CSTNode) -> Iterator[cst.Call]:
        """Calls that run when ``node`` runs (not those of nested functions or classes),
        in document order."""
        if isinstance(node, cst.Call):
            yield node
        for call in self.index.descendants(node, cst.Call):
            nested = False
            for ancestor in self.index.ancestors(call):
                if ancestor is node:
                    break
                if isinstance(ancestor, _SCOPES):
                    nested = True
                    break
            if not nested:
                yield call  # type: ignore[misc]

    def _may_be_event(self, call: cst.Call) -> bool:
        """``_event`` can answer for ``call``: a mode call on a copy, or a call of a local
        function. Any other call never changes a copy's mode."""
        return id(call) in self._direct or bool(self.loops.local_targets(call))

    def _candidates(self) -> tuple[list[int], list[cst.Call]]:
        """The calls that may be events, in document order, with their preorder numbers."""
        found = self._candidate_calls
        if found is None:
            calls = [c for c in self.ctx.nodes(cst.Call) if self._may_be_event(c)]  # type: ignore[arg-type]
            orders = [self.index.order[id(c)] for c in calls]
            found = self._candidate_calls = (orders, calls)
        return found

    def _event_calls(self, node: cst.CSTNode) -> Iterator[cst.Call]:
        """The calls of ``_calls(node)`` that may be events, in document order: looked up
        in the module's table of candidates, so a walk over a long block stays linear."""
        span = self.index.span(node)
        if span is None:
            yield from (c for c in self._calls(node) if self._may_be_event(c))
            return
        orders, calls = self._candidates()
        lo = bisect.bisect_left(orders, span[0])
        hi = bisect.bisect_right(orders, span[1])
        for call in calls[lo:hi]:
            if call is node or not self._nested(call, node):
                yield call

    def _nested(self, call: cst.Call, node: cst.CSTNode) -> bool:
        """``call`` (inside ``node``) belongs to a function, lambda or class nested in it."""
        for ancestor in self.index.ancestors(call):
            if ancestor is node:
                return False
            if isinstance(ancestor, _SCOPES):
                return True
        return False

    def _siblings_before(
        self, container: cst.IndentedBlock | cst.Module, current: cst.CSTNode, obj: AveragingObject
    ) -> list[cst.CSTNode]:
        """The statements of ``container`` before ``current``, last first, that may hold an
        event for ``obj`` (a candidate call or its creation); the others hold none."""
        body = list(container.body)
        span = self.index.span(container)
        at = self.index.order_of(current)
        if span is None or at is None:
            position = next((i for i, s in enumerate(body) if s is current), 0)
            return list(reversed(body[:position]))
        firsts = self._sibling_starts.get(id(container))
        if firsts is None:
            order = self.index.order
            firsts = self._sibling_starts[id(container)] = [order[id(s)] for s in body]
        orders, _ = self._candidates()
        marks = orders[bisect.bisect_right(orders, span[0]) : bisect.bisect_left(orders, at)]
        creation = self.index.order_of(obj.creation)
        if creation is not None and span[0] < creation < at:
            marks = [*marks, creation]
        held = {bisect.bisect_right(firsts, mark) - 1 for mark in marks}
        return [body[i] for i in sorted(held, reverse=True) if i >= 0]

    def _last_event(self, node: cst.CSTNode, obj: AveragingObject, depth: int) -> Mode | None:
        """The mode the last event for ``obj`` inside ``node`` leaves it in, if any (its
        creation counts as an event: the initial mode)."""
        found: Mode | None = None
        if self.index.contains(node, obj.creation):
            found = self.initial_mode(obj)
        for call in self._event_calls(node):
            mode = self._event(call, obj, depth)
            if mode is not None:
                found = mode
        return found

    def _last_event_after(
        self, loop: cst.For | cst.While, node: cst.CSTNode, obj: AveragingObject, depth: int
    ) -> Mode | None:
        """The last event for ``obj`` in ``loop``'s body after ``node``: what the previous
        iteration left the copy in."""
        found: Mode | None = None
        for call in self._event_calls(loop.body):
            if not self.index.is_before(node, call) or self.index.contains(call, node):
                continue
            mode = self._event(call, obj, depth)
            if mode is not None:
                found = mode
        return found

    def _event(self, call: cst.Call, obj: AveragingObject, depth: int) -> Mode | None:
        direct = self.is_event(call, obj)
        if direct is not None:
            return direct
        if depth >= self.MAX_DEPTH:
            return None
        for target in self.loops.local_targets(call):
            mode = self._function_mode(target, obj, depth + 1)
            if mode is not None:
                return mode
            for position, arg in enumerate(call.args):
                if arg.star or self.objects.for_expression(arg.value) is not obj:
                    continue
                param = self.param_name(target, arg, position)
                if param is not None:
                    mode = self.param_sets_mode(target, param)
                    if mode is not None:
                        return mode
        return None

    def param_name(self, fn: cst.FunctionDef, arg: cst.Arg, position: int) -> str | None:
        """The parameter of ``fn`` that ``arg`` (the ``position``-th argument) binds."""
        if arg.keyword is not None:
            return arg.keyword.value
        params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
        if params and params[0] in ("self", "cls") and self.loops.class_of(fn) is not None:
            params = params[1:]
        return params[position] if position < len(params) else None

    def _function_mode(self, fn: cst.FunctionDef, obj: AveragingObject, depth: int) -> Mode | None:
        """The mode a local function leaves the copy in, if it sets one."""
        key = (id(fn), id(obj))
        if key in self._function_modes:
            return self._function_modes[key]
        self._function_modes[key] = None  # cycle guard
        found: Mode | None = None
        for call in self._event_calls(fn.body):
            mode = self._event(call, obj, depth)
            if mode is not None:
                found = mode
        self._function_modes[key] = found
        return found

    # A live model ----------------------------------------------------------------------------
    def live_mode_at(
        self, model: cst.BaseExpression, node: cst.CSTNode
    ) -> tuple[Mode, cst.Call | None]:
        """The mode of the live model ``model`` when ``node`` runs, with the ``.train()`` /
        ``.eval()`` call that decides it; UNKNOWN unless such a call is found on every path."""
        code = dotted_name(model)
        if code is None:
            return Mode.UNKNOWN, None
        return self._live_walk(code, node, 0, frozenset())

    def _live_walk(
        self, code: str, node: cst.CSTNode, depth: int, seen: frozenset[int]
    ) -> tuple[Mode, cst.Call | None]:
        current: cst.CSTNode | None = self.index.statement(node)
        while current is not None:
            container = self.index.parent(current)
            if isinstance(container, (cst.IndentedBlock, cst.Module)):
                body = list(container.body)
                position = next((i for i, s in enumerate(body) if s is current), 0)
                for sibling in reversed(body[:position]):
                    found = self._live_last(self._calls(sibling), code, depth, sibling)
                    if found is not None:
                        return found
            owner = self._owner(current)
            if owner is None or isinstance(owner, cst.Lambda):
                return Mode.UNKNOWN, None
            if isinstance(owner, cst.FunctionDef):
                return self._live_entry(code, owner, depth, seen)
            if isinstance(owner, (cst.For, cst.While)) and self.index.contains(owner.body, node):
                after = [
                    c
                    for c in self._calls(owner.body)
                    if self.index.is_before(node, c) and not self.index.contains(c, node)
                ]
                found = self._live_last(iter(after), code, depth, owner.body)
                if found is not None and found[0] is Mode.TRAIN:
                    return found
            if isinstance(owner, cst.Try) and not self.index.contains(owner.body, node):
                found = self._live_last(self._calls(owner.body), code, depth, owner.body)
                if found is not None:
                    return found
            current = owner
        return Mode.UNKNOWN, None

    def _live_last(
        self, calls: Iterator[cst.Call], code: str, depth: int, root: cst.CSTNode | None = None
    ) -> tuple[Mode, cst.Call | None] | None:
        """The last mode event in ``calls``; one that runs only on some paths through
        ``root`` (under an ``if``) decides nothing: UNKNOWN. A loop body counts as run
        (a loop over batches runs at least once)."""
        found = None
        for call in calls:
            mode = self._live_event(call, code, depth)
            if mode is not None:
                found = (mode, call)
        if found is not None and root is not None and self._conditional(found[1], root):
            return Mode.UNKNOWN, None
        return found

    def _conditional(self, call: cst.CSTNode, root: cst.CSTNode) -> bool:
        for ancestor in self.index.ancestors(call):
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.BooleanOperation, cst.ExceptHandler)):
                return True
            if isinstance(ancestor, _SCOPES):
                return True
            if ancestor is root:
                return False
        return False

    def _live_event(self, call: cst.Call, code: str, depth: int) -> Mode | None:
        mode = _mode_of_call(call)
        if mode is not None:
            receiver = dotted_name(call.func.value)  # type: ignore[attr-defined]
            if receiver is not None and _same_model(receiver, code):
                return mode
            return None
        if depth >= self.MAX_DEPTH:
            return None
        for target in self.loops.local_targets(call):
            for position, arg in enumerate(call.args):
                passed = dotted_name(arg.value) if not arg.star else None
                if passed is None or not _same_model(passed, code):
                    continue
                param = self.param_name(target, arg, position)
                if param is not None:
                    events = self._param_events.get((id(target), param), [])
                    if events:
                        return events[-1][1]
            if code.startswith("self.") and self._same_class(call, target):
                inner = self._live_last(self._calls(target.body), code, depth + 1, target.body)
                if inner is not None:
                    return inner[0]
        return None

    def _same_class(self, call: cst.Call, target: cst.FunctionDef) -> bool:
        fn = self.loops.function_of(call)
        cls = self.loops.class_of(fn) if fn is not None else None
        return cls is not None and cls is self.loops.class_of(target)

    def _live_entry(
        self, code: str, fn: cst.FunctionDef, depth: int, seen: frozenset[int]
    ) -> tuple[Mode, cst.Call | None]:
        """At the top of ``fn``: the mode every call site gives the model (a parameter's
        model as the caller passes it); UNKNOWN for a local or framework-called function."""
        if self.hooks.lightning_hook(fn) or depth >= self.MAX_DEPTH or id(fn) in seen:
            return Mode.UNKNOWN, None
        callers = self.loops.callers(fn)
        if not callers:
            return Mode.UNKNOWN, None
        root, _, rest = code.partition(".")
        params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
        params += [p.name.value for p in fn.params.kwonly_params]
        if root != "self" and root not in params:
            return Mode.UNKNOWN, None  # a name of this function: nothing set its mode
        results = []
        for call in callers:
            caller_code: str | None = code
            if root != "self":
                caller_code = None
                for position, arg in enumerate(call.args):
                    if not arg.star and self.param_name(fn, arg, position) == root:
                        passed = dotted_name(arg.value)
                        caller_code = f"{passed}.{rest}" if passed and rest else passed
            if caller_code is None:
                return Mode.UNKNOWN, None
            results.append(self._live_walk(caller_code, call, depth + 1, seen | {id(fn)}))
        if all(mode is Mode.TRAIN for mode, _ in results):
            return results[0]
        if all(mode is Mode.EVAL for mode, _ in results):
            return results[0]
        return Mode.UNKNOWN, None

    # The online model's mode at the copy --------------------------------------------------------
    def _source_mode(self, obj: AveragingObject) -> Mode:
        """``model.eval(); ema = deepcopy(model)``: the copy starts in the source's mode."""
        source = obj.source
        code = dotted_name(source) if source is not None else None
        if code is None:
            return Mode.TRAIN
        statement = self.index.statement(obj.creation)
        container = self.index.parent(statement) if statement is not None else None
        if not isinstance(container, (cst.IndentedBlock, cst.Module)):
            return Mode.TRAIN
        before: list[cst.CSTNode] = []
        for sibling in container.body:
            if sibling is statement:
                break
            before.append(sibling)
        for sibling in reversed(before):
            for call in reversed(list(self._calls(sibling))):
                mode = _mode_of_call(call)
                if mode is not None and dotted_name(call.func.value) == code:  # type: ignore[attr-defined]
                    return mode
            mode = _built_in_mode(sibling, code)
            if mode is not None:
                return mode
        return Mode.TRAIN
