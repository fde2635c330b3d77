"""Hand-written in-place averaging updates: which tensor is the average, with which weights.

Real code writes the update a dozen ways: ``e.mul_(d).add_(p, alpha=1 - d)``,
``e.lerp_(p, 1 - d)`` (``torch.lerp(e, p, 1 - d, out=e)``), ``e.copy_(e * d + p * (1 -
d))``, EDM's ``e.copy_(p.detach().lerp(e, beta))``, ``e.data = d * e.data + (1 - d) * p.data``,
``torch._foreach_lerp_(ema_params, params, 1 - d)``, the legacy ``add_(1 - d, p)``, or
``mul_`` and ``add_`` (``_foreach_mul_`` and ``_foreach_add_``) as two statements, the
difference forms ``e.sub_((e - p) * k)`` / ``e.add_(p - e, alpha=k)``, and the rebinding
forms that compute an average without writing it anywhere (``e = d * e + (1 - d) * p``,
``e = e.lerp(p, w)``, ``sd[k] = ...`` on a dict from ``state_dict()``), also through a
temporary (``t = d * s[k] + (1 - d) * p`` then ``s[k] = t.clone()``). This provider
recognises them, says which operand is the shadow (the average being updated) and which the
source, what each side is iterated from (``zip(ema.parameters(), model.parameters())``,
``named_parameters()``, ``state_dict().items()``, a list built from them), and gives the
coefficient of each as an expression (resolve it with ``ValueResolver``), without judging
them: the averaging model uses the shadow to find hand-made EMA copies; the EMA3xx rules
judge the coefficients, the binding and the grad mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import dotted_name
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.syntax.vocabulary import NOT_WEIGHT_TOKENS, is_averaged_name, tokens

from ..syntax.params import all_params, positional_names

_INPLACE = {"mul_", "add_", "lerp_", "copy_", "sub_"}
# JAX's maps over parameter trees (``jax.tree.map``, ``jax.tree_util.tree_map``).
_TREE_MAPS = {"tree_map", "tree_multimap", "map"}  # ``map`` only as ``jax.tree.map``
# The methods that iterate a model's weights (what a side of an update is read from).
WEIGHT_METHODS = frozenset(
    {
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "state_dict",
        "trainable_variables",
        "variables",
    }
)
# Of those, the ones whose tensors autograd tracks (``state_dict()`` tensors are detached).
GRAD_METHODS = frozenset({"parameters", "named_parameters", "trainable_variables"})
# Calls that make a new tensor from a weight: a list of them is a copy, not the model's own.
_COPYING = {
    "clone",
    "deepcopy",
    "zeros_like",
    "empty_like",
    "ones_like",
    "float",
    "to",
    "half",
    "double",
    "cpu",
    "cuda",
    "copy",
}
# Calls that hold the same tensors in another container: ``OrderedDict(m.named_parameters())``.
_WRAPPING = frozenset({"list", "tuple", "iter", "dict", "OrderedDict", "collections.OrderedDict"})
_CONTAINER_METHODS = {
    "parameters",
    "named_parameters",
    "buffers",
    "named_buffers",
    "state_dict",
    "values",
    "items",
    "trainable_variables",
    "variables",
}


@dataclass(frozen=True, eq=False)
class Coefficient:
    """A weight of the update: ``expr``, or ``1 - expr`` when ``complement``."""

    expr: cst.BaseExpression
    complement: bool = False


@dataclass(frozen=True, eq=False)
class InPlaceUpdate:
    """One hand-written averaging update."""

    node: cst.CSTNode  # the outermost call or the assignment
    shadow: cst.BaseExpression  # the tensor(s) being averaged, as written
    source: cst.BaseExpression | None  # the online tensor(s)
    old_weight: Coefficient | None  # the weight on the shadow's previous value (D)
    new_weight: Coefficient | None  # the weight on the source (1 - D)
    form: str  # "mul_add", "lerp", "copy", "assign", "sub", "foreach"
    loop: cst.For | None = None  # the loop binding shadow and source, if any
    # What the loop iterates for each side: ``ema`` in ``zip(ema.parameters(), ...)``.
    shadow_container: cst.BaseExpression | None = None
    source_container: cst.BaseExpression | None = None
    # The method each side is iterated from (``parameters``, ``named_parameters``,
    # ``state_dict``, ``buffers``...), through names and ``list(...)``; None if unknown.
    shadow_method: str | None = None
    source_method: str | None = None
    # A sign slip: ``e.add_((e - p) * k)`` moves the shadow away from the source. The weights
    # are then those the update was meant to have (old 1 - k, new k).
    away: bool = False
    # The separate ``mul_`` (``_foreach_mul_``) call of a two-statement update.
    first: cst.Call | None = None
    # ``t = d * s[k] + (1 - d) * p`` when the update writes ``t`` back (``s[k] = t.clone()``).
    temp: cst.Assign | None = None
    # ``e = e * d`` as the first half of a two-statement update (``e += (1 - d) * p`` next):
    # the rebinding makes the second half land on a temporary.
    rebind: cst.Assign | None = None
    # ``e.mul(d)`` in the statement ``e.mul(d).add_(p, alpha=1 - d)``: an out-of-place head
    # makes a new tensor, and the in-place rest updates that temporary, not ``e``.
    head: cst.Call | None = None
    # ``AveragedModel(model, avg_fn=f)``: the call ``f`` is handed to (form ``avg_fn``).
    owner: cst.Call | None = None
    # ``e.lerp(p, w)`` (``torch.lerp(e, p, w)``, ``e.sub(k * (e - p))``, ``e.mul(d).add(p,
    # alpha=1 - d)``) as a bare statement: computed out of place and dropped.
    dropped: bool = False


def strip_tensor(node: cst.BaseExpression) -> cst.BaseExpression:
    """``p.data`` / ``p.detach()`` / ``p.data.detach()`` -> ``p``."""
    while True:
        if isinstance(node, cst.Attribute) and node.attr.value == "data":
            node = node.value
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in ("detach", "float", "to", "clone")
        ):
            node = node.func.value
        else:
            return node


def _whole(node: cst.BaseExpression) -> cst.BaseExpression:
    """``x[...]`` -> ``x``: the whole array (flax nnx variables, numpy views)."""
    if (
        isinstance(node, cst.Subscript)
        and len(node.slice) == 1
        and isinstance(node.slice[0].slice, cst.Index)
        and isinstance(node.slice[0].slice.value, cst.Ellipsis)
    ):
        return node.value
    return node


def container_of(node: cst.BaseExpression) -> cst.BaseExpression:
    """``ema.module.state_dict().values()`` -> ``ema.module``."""
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _CONTAINER_METHODS
    ):
        node = node.func.value
    if isinstance(node, cst.Attribute) and node.attr.value in ("trainable_variables", "variables"):
        node = node.value
    return node


class InPlaceUpdates:
    """Every hand-written averaging update of the module."""

    MAX_DEPTH = 6

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.updates: list[InPlaceUpdate] = []
        self._code: dict[int, str] = {}
        self._functions: dict[str, cst.FunctionDef] | None = None
        self._resolver: ValueResolver | None = None
        self._appends: dict[tuple[int, str], tuple[cst.BaseExpression, str | None] | None] = {}
        for call in ctx.nodes(cst.Call):
            found = self._from_call(call)
            if found is not None:
                self.updates.append(found)
        for assign in ctx.nodes(cst.Assign):
            if not isinstance(assign.value, (cst.BinaryOperation, cst.Call, cst.Name)):
                continue
            found = self._from_assign(assign)
            if found is not None:
                self.updates.append(found)
        for aug in ctx.nodes(cst.AugAssign):
            found = self._from_augassign(aug)
            if found is not None:
                self.updates.append(found)
        handled: set[int] = set()
        for call in ctx.nodes(cst.Call):
            found = self._avg_fn(call)
            if found is not None:
                self.updates.append(found)
                handled.add(id(found.node))
        for ret in ctx.nodes(cst.Return):
            if id(ret) in handled:
                continue
            found = self._returned(ret)
            if found is not None:
                self.updates.append(found)
        self.updates.sort(key=lambda u: self.index.order[id(u.node)])

    @classmethod
    def build(cls, ctx: FileContext) -> InPlaceUpdates:
        return cls(ctx)

    # Public -----------------------------------------------------------------------------------
    def statements(self, update: InPlaceUpdate) -> list[cst.CSTNode]:
        """The statements that make up the update, in order (two for ``mul_`` then ``add_``,
        or a temporary then its write-back)."""
        found: list[cst.CSTNode] = []
        for node in (update.first, update.rebind, update.temp, update.node):
            if node is None:
                continue
            statement = self.index.statement(node)
            if statement is not None and all(statement is not s for s in found):
                found.append(statement)
        return found

    def discarded(self, update: InPlaceUpdate) -> str | None:
        """Why the update's result never reaches the shadow, or None when it does.

        ``"loop variable"``: ``e = ...`` rebinds the loop's own variable (``for e, p in
        zip(...)``); ``"local name"``: it rebinds a local name bound from the shadow
        (``s = sd[k]``) or a parameter, and nothing reads the name afterwards;
        ``"state_dict"``: ``sd[k] = ...`` replaces an entry of a dict returned by
        ``state_dict()`` (or ``dict(m.named_parameters())``) that is never loaded back;
        ``"statement"``: an out-of-place average as a bare statement (``e.lerp(p, w)``).
        """
        if update.rebind is not None:
            return self._dead_rebind(update, update.rebind)
        if update.dropped:
            return "statement"
        node = update.node
        if not isinstance(node, cst.Assign) or len(node.targets) != 1:
            return None
        target = node.targets[0].target
        if isinstance(target, cst.Name):
            return self._dead_name(node, target)
        if isinstance(target, cst.Subscript):
            return self._dead_entry(target)
        return None

    def dead_entry(self, target: cst.Subscript) -> str | None:
        """``"state_dict"`` when ``target`` (``sd[k]``) is an entry of a dict made by
        ``state_dict()`` (or ``dict(m.named_parameters())``) that is never loaded back, so
        writing it changes no tensor of the model; else None."""
        return self._dead_entry(target)

    def rebinding(self, update: InPlaceUpdate) -> cst.Assign | None:
        """The assignment that rebinds the shadow's name (the update itself, or the first
        half of a two-statement update), when the update writes through a name."""
        if update.rebind is not None:
            return update.rebind
        return update.node if isinstance(update.node, cst.Assign) else None

    def container(self, expr: cst.BaseExpression) -> tuple[cst.BaseExpression, str | None]:
        """What an iterable of tensors is read from: ``list(ema.parameters())`` -> (ema,
        "parameters"), followed through names bound once; a list of clones is its own
        container (method None)."""
        return self._container(expr, 0)

    # Helpers --------------------------------------------------------------------------------
    def code(self, node: cst.CSTNode) -> str:
        key = id(node)
        text = self._code.get(key)
        if text is None:
            text = self._code[key] = cst.Module([]).code_for_node(node)
        return text

    @property
    def resolver(self) -> ValueResolver:
        if self._resolver is None:
            self._resolver = self.ctx.get(ValueResolver)
        return self._resolver

    def _same(self, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
        left, right = _whole(strip_tensor(a)), _whole(strip_tensor(b))
        left_code, right_code = self.code(left), self.code(right)
        if left_code == right_code:
            return True
        # ``ema_v = esd[k]`` then ``esd[k].copy_(ema_v * d + (1 - d) * model_v)``: a name
        # bound once to the tensor is the tensor.
        for alias, other in ((left, right_code), (right, left_code)):
            if not isinstance(alias, cst.Name):
                continue
            value = self.resolver.assigned_value(alias)
            if (
                isinstance(value, (cst.Subscript, cst.Attribute))
                and self.code(_whole(strip_tensor(value))) == other
            ):
                return True
        return False

    def _outermost(self, call: cst.Call) -> bool:
        parent = self.index.parent(call)
        if isinstance(parent, cst.Attribute) and parent.value is call:
            grand = self.index.parent(parent)
            if isinstance(grand, cst.Call) and parent.attr.value in _INPLACE:
                return False
        return True

    def _out_of_place_head(self, call: cst.Call, root: cst.BaseExpression) -> bool:
        """``e.mul(d).add_(...)`` as a whole statement: the ``add_`` lands on the product."""
        return (
            isinstance(root, cst.Call)
            and isinstance(root.func, cst.Attribute)
            and root.func.attr.value == "mul"
            and isinstance(self.index.parent(call), cst.Expr)
        )

    # Calls ------------------------------------------------------------------------------------
    def _from_call(self, call: cst.Call) -> InPlaceUpdate | None:
        func = call.func
        if isinstance(func, cst.Name) and func.value in _TREE_MAPS:
            return self._tree_map(call)
        if not isinstance(func, cst.Attribute):
            return None
        attr = func.attr.value
        if attr in ("_foreach_lerp_", "_foreach_add_"):
            return self._foreach(call, attr)
        if attr == "lerp":
            return self._lerp_out(call) or self._dropped(call)
        if attr in _TREE_MAPS:
            return self._tree_map(call)
        if attr in ("add", "sub"):
            return self._dropped(call)
        if attr not in _INPLACE:
            return None
        if not self._outermost(call):
            return None
        ops: list[tuple[str, cst.Call]] = []
        node: cst.BaseExpression = call
        while (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _INPLACE
        ):
            ops.append((node.func.attr.value, node))
            node = node.func.value
        ops.reverse()
        root = node
        methods = [m for m, _ in ops]
        if methods == ["mul_", "add_"]:
            source, new = self._added(ops[1][1])
            if source is None:
                return None
            old = Coefficient(ops[0][1].args[0].value) if ops[0][1].args else None
            return self._make(call, root, source, old, new, "mul_add")
        if methods == ["add_"] and self._out_of_place_head(call, root):
            assert isinstance(root, cst.Call) and isinstance(root.func, cst.Attribute)
            source, new = self._added(call)
            if source is None or len(root.args) != 1:
                return None
            old = Coefficient(root.args[0].value)
            found = self._make(call, root.func.value, source, old, new, "mul_add")
            return replace(found, head=root)
        if methods == ["add_"]:
            previous = self._previous_mul(call, root)
            if previous is None:
                found = self._difference(call, root, 1, "add")
                return found if found is not None else self._after_shrink(call, root)
            source, new = self._added(call)
            if source is None:
                return None
            mul, weight = previous
            return self._make(call, root, source, Coefficient(weight), new, "mul_add", first=mul)
        if methods == ["lerp_"] and call.args:
            source = call.args[0].value
            weight = _arg(call, 1, "weight")
            if weight is None:
                return None
            return self._make(
                call, root, source, Coefficient(weight, True), Coefficient(weight), "lerp"
            )
        if methods == ["copy_"] and call.args:
            value = call.args[0].value
            found = self._combination(call, root, value, "copy")
            if found is None:
                found = self._through_temp(call, root, value, "copy")
            return found
        if methods == ["sub_"] and call.args:
            return self._difference(call, root, -1, "sub")
        return None

    def _lerp_out(self, call: cst.Call) -> InPlaceUpdate | None:
        """``torch.lerp(e, p, w, out=e)``: written into one of its own operands, the
        out-of-place ``lerp`` is the in-place update (``e.lerp_(p, w)``); with ``out=`` the
        end (``torch.lerp(p, e, d, out=e)``) the weight is the shadow's."""
        if dotted_name(call.func) != "torch.lerp":
            return None
        out = next((a.value for a in call.args if a.keyword and a.keyword.value == "out"), None)
        if out is None or any(a.star for a in call.args):
            return None
        start, end = _arg(call, 0, "input"), _arg(call, 1, "end")
        weight = _arg(call, 2, "weight")
        if start is None or end is None or weight is None:
            return None
        if self._same(start, out) and not self._same(end, out):
            return self._make(
                call, out, end, Coefficient(weight, True), Coefficient(weight), "lerp"
            )
        if self._same(end, out) and not self._same(start, out):
            return self._make(
                call, out, start, Coefficient(weight), Coefficient(weight, True), "lerp"
            )
        return None

    def _dropped(self, call: cst.Call) -> InPlaceUpdate | None:
        """An out-of-place average as a bare statement, whose result nothing keeps:
        ``e.lerp(p, w)``, ``torch.lerp(e, p, w)`` without ``out=``, ``e.sub(k * (e - p))``,
        ``e.mul(d).add(p, alpha=1 - d)``, or ``e.mul_(d).add(p, alpha=1 - d)`` (only the
        scaling is kept); the shadow is the tensor the average starts from."""
        if not isinstance(self.index.parent(call), cst.Expr):
            return None
        found: InPlaceUpdate | None = None
        if dotted_name(call.func) == "torch.lerp":
            if any(a.star or (a.keyword and a.keyword.value == "out") for a in call.args):
                return None
            start, end = _arg(call, 0, "input"), _arg(call, 1, "end")
            weight = _arg(call, 2, "weight")
            if start is None or end is None or weight is None or self._same(start, end):
                return None
            found = self._make(
                call, start, end, Coefficient(weight, True), Coefficient(weight), "lerp"
            )
        elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "lerp":
            start, end = call.func.value, _arg(call, 0, "end")
            weight = _arg(call, 1, "weight")
            if end is None or weight is None or self._same(start, end):
                return None
            found = self._make(
                call, start, end, Coefficient(weight, True), Coefficient(weight), "lerp"
            )
        else:
            root: cst.BaseExpression = call
            methods: list[str] = []
            while isinstance(root, cst.Call) and isinstance(root.func, cst.Attribute):
                methods.append(root.func.attr.value)
                root = root.func.value
            # ``e.mul_(d).add(p, alpha=1 - d)``: the scaling lands in the shadow, the sum in a
            # temporary the statement drops. Another in-place step: not a dropped copy.
            if methods != ["add", "mul_"] and not set(methods) <= {"mul", "add", "sub"}:
                return None
            found = self._out_of_place_chain(call, call, root)
        if found is None or not isinstance(
            strip_tensor(found.shadow), (cst.Name, cst.Attribute, cst.Subscript)
        ):
            return None
        return replace(found, dropped=True)

    def _added(self, call: cst.Call) -> tuple[cst.BaseExpression | None, Coefficient | None]:
        """What ``add_`` adds; a lone short name (``add_(w)``) that reads like a weight is the
        tensor when a ``for`` around the call binds it (``for e, w in zip(...)``)."""
        source, new = _added(call)
        if source is not None:
            return source, new
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(call.args) == 1 and len(positional) == 1:
            name = strip_tensor(positional[0])
            if isinstance(name, cst.Name) and any(
                isinstance(loop, cst.For) and name.value in _for_targets(loop)
                for loop in self.index.ancestors(call)
            ):
                return positional[0], Coefficient(_ONE)
        return None, None

    def _previous_statement(self, node: cst.CSTNode) -> cst.BaseSmallStatement | None:
        """The single small statement just before the statement holding ``node``."""
        statement = self.index.statement(node)
        block = self.index.parent(statement) if statement is not None else None
        body = getattr(block, "body", None)
        position = self.index.body_position(statement) if statement is not None else None
        if not isinstance(body, (list, tuple)) or position is None:
            return None
        if position == 0:
            return None
        before = body[position - 1]
        if not isinstance(before, cst.SimpleStatementLine) or len(before.body) != 1:
            return None
        return before.body[0]

    def _previous_mul(
        self, call: cst.Call, root: cst.BaseExpression
    ) -> tuple[cst.Call, cst.BaseExpression] | None:
        """``root.mul_(d)`` as the statement just before the one holding ``call``."""
        expr = self._previous_statement(call)
        if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
            return None
        mul = expr.value
        if (
            isinstance(mul.func, cst.Attribute)
            and mul.func.attr.value == "mul_"
            and mul.args
            and self._same(mul.func.value, root)
        ):
            return mul, mul.args[0].value
        return None

    def _shrink(
        self, before: cst.BaseSmallStatement | None, target: cst.BaseExpression
    ) -> tuple[cst.CSTNode, Coefficient, bool] | None:
        """The first half of a two-statement update that scales ``target`` by its own
        weight: ``e.add_(-k * e)`` or ``e.sub_(k * e)`` (weight 1 - k, the SWA running mean's
        ``e.add_(-inv * e)``), ``e -= k * e``; also out of place, bound to ``e`` (``e =
        e.add(-k * e)``). The node, the weight, and whether it rebinds the name."""
        rebind = False
        call: cst.BaseExpression | None = None
        if isinstance(before, cst.Expr):
            call = before.value
        elif (
            isinstance(before, cst.Assign)
            and len(before.targets) == 1
            and isinstance(target, (cst.Name, cst.Attribute))
            and isinstance(strip_tensor(target), cst.Name)
            and isinstance(before.targets[0].target, cst.Name)
            and self._same(before.targets[0].target, target)
        ):
            call, rebind = before.value, True
        elif (
            isinstance(before, cst.AugAssign)
            and isinstance(before.operator, cst.SubtractAssign)
            and self._same(before.target, target)
        ):
            k = self._own_share(before.value, target)
            return (before, Coefficient(k, True), False) if k is not None else None
        if not (
            isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value.rstrip("_") in ("add", "sub")
            and (rebind or call.func.attr.value.endswith("_"))
            and len(call.args) == 1
            and call.args[0].keyword is None
            and self._same(call.func.value, target)
        ):
            return None
        node: cst.CSTNode = before if rebind else call  # type: ignore[assignment]
        value = call.args[0].value
        if call.func.attr.value.startswith("sub"):
            k = self._own_share(value, target)
            return (node, Coefficient(k, True), rebind) if k is not None else None
        negated = self._own_share(value, target)
        if (
            isinstance(negated, cst.UnaryOperation)
            and isinstance(negated.operator, cst.Minus)
            and not negated.lpar
        ):
            return node, Coefficient(negated.expression, True), rebind
        return None

    def _own_share(
        self, value: cst.BaseExpression, target: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        """``k * e`` (or ``e * k``) -> ``k``: the factor of a product with the target."""
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
            if self._same(value.right, target) and not self._same(value.left, target):
                return value.left
            if self._same(value.left, target) and not self._same(value.right, target):
                return value.right
        return None

    def _after_shrink(self, call: cst.Call, root: cst.BaseExpression) -> InPlaceUpdate | None:
        """``e.add_(-k * e)`` then ``e.add_(k * p)``: the shadow scaled by 1 - k, then the
        source added with weight k (the SWA running mean with ``k = 1 / n``)."""
        shrink = self._shrink(self._previous_statement(call), root)
        if shrink is None:
            return None
        first, old, rebind = shrink
        source, new = self._added_share(call, old.expr)
        if source is None or new is None or self._same(source, root):
            return None
        return self._make(
            call,
            root,
            source,
            old,
            new,
            "mul_add",
            first=None if rebind or not isinstance(first, cst.Call) else first,
            rebind=first if rebind and isinstance(first, cst.Assign) else None,
        )

    def _added_share(
        self, call: cst.Call, share: cst.BaseExpression
    ) -> tuple[cst.BaseExpression | None, Coefficient | None]:
        """What ``add_`` adds after the shadow was scaled by ``1 - share``: ``k * p`` is
        ``p`` with weight ``k`` whatever ``k`` is named, when it is the same ``k``."""
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        if len(call.args) == 1 and len(positional) == 1:
            value = positional[0]
            if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
                for tensor, weight in ((value.right, value.left), (value.left, value.right)):
                    if self._same(weight, share):
                        return tensor, Coefficient(weight)
        return self._added(call)

    def _combination(
        self,
        node: cst.CSTNode,
        target: cst.BaseExpression,
        expr: cst.BaseExpression,
        form: str,
        temp: cst.Assign | None = None,
    ) -> InPlaceUpdate | None:
        """``target <- a*target + b*source`` or a ``lerp`` between the two."""
        if (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value == "lerp"
            and expr.args
        ):
            start = expr.func.value
            end = expr.args[0].value
            weight = _arg(expr, 1, "weight")
            if weight is None:
                return None
            if self._same(end, target):  # EDM: p_net.lerp(p_ema, beta): beta on the shadow
                return self._make(
                    node,
                    target,
                    start,
                    Coefficient(weight),
                    Coefficient(weight, True),
                    form,
                    temp=temp,
                )
            if self._same(start, target):
                return self._make(
                    node,
                    target,
                    end,
                    Coefficient(weight, True),
                    Coefficient(weight),
                    form,
                    temp=temp,
                )
            return None
        terms = _terms(expr)
        if terms is None or len(terms) != 2:
            return None
        old = new = None
        source = None
        for tensor, coefficient in terms:
            if self._same(tensor, target):
                old = coefficient
            else:
                source, new = tensor, coefficient
        if old is None or source is None:
            return None
        return self._make(node, target, source, Coefficient(old), Coefficient(new), form, temp=temp)

    def _through_temp(
        self,
        node: cst.CSTNode,
        target: cst.BaseExpression,
        value: cst.BaseExpression,
        form: str,
    ) -> InPlaceUpdate | None:
        """``t = d * s[k] + (1 - d) * p`` just before ``s[k] = t.clone()`` / ``s[k].copy_(t)``."""
        name = strip_tensor(value)
        if not isinstance(name, cst.Name):
            return None
        statement = self.index.statement(node)
        block = self.index.parent(statement) if statement is not None else None
        body = getattr(block, "body", None)
        position = self.index.body_position(statement) if statement is not None else None
        if not isinstance(body, (list, tuple)) or position is None:
            return None
        # The temporary is computed just before (a statement or two between at most).
        for before in reversed(list(body)[max(0, position - 3) : position]):
            if not isinstance(before, cst.SimpleStatementLine):
                return None
            for small in before.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == name.value
                ):
                    return self._combination(node, target, small.value, form, temp=small)
        return None

    def _difference(
        self,
        call: cst.Call,
        target: cst.BaseExpression,
        sign: int,
        form: str,
        node: cst.CSTNode | None = None,
    ) -> InPlaceUpdate | None:
        """``e.sub_((e - p) * k)``, ``e.add_(p - e, alpha=k)``, legacy ``e.add_(k, p - e)``:
        k is the weight on the new value. The other sign moves away from ``p``."""
        args = [a for a in call.args if not a.star]
        positional = [a.value for a in args if a.keyword is None]
        alpha = next((a.value for a in args if a.keyword and a.keyword.value == "alpha"), None)
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
        if alpha is not None and len(positional) == 1:
            pairs.append((positional[0], alpha))
        elif len(positional) == 2 and _is_scalar_like(positional[0]):
            pairs.append((positional[1], positional[0]))
        elif len(positional) == 1:
            expr = positional[0]
            if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
                pairs += [(expr.left, expr.right), (expr.right, expr.left)]
            elif isinstance(expr, cst.Name):
                pairs += self._scaled_difference(call, expr)
        for diff, k in pairs:
            sides = self._difference_sides(diff, target, sign)
            if sides is None:
                continue
            source, toward = sides
            return self._make(
                call if node is None else node,
                target,
                source,
                Coefficient(k, True),
                Coefficient(k),
                form,
                away=not toward,
            )
        return None

    def is_tree_map(self, call: cst.Call) -> bool:
        """``jax.tree.map``, ``jax.tree_util.tree_map``, ``tree_multimap``, ``jtu.tree_map``."""
        name = dotted_name(call.func) or ""
        last = name.rsplit(".", 1)[-1]
        if last not in _TREE_MAPS or (last == "map" and not name.endswith("tree.map")):
            return False
        return "." not in name or name.startswith(("jax.", "tree_util.", "jtu.", "tree."))

    def applied_to_weights(self, call: cst.Call) -> bool:
        """``call`` runs in what a tree map applies to an averaged tree and another:
        ``jax.tree.map(lambda e, p: ema(e, p, d), ema_params, params)``, or the lambda bound
        to a name first (``f = lambda e, p: ...; jax.tree_multimap(f, ema_params, params)``)."""
        function = self.index.enclosing(call, cst.Lambda, cst.FunctionDef)
        if not isinstance(function, cst.Lambda):
            return False
        holder = self.index.parent(function)
        users: list[cst.CSTNode] = []
        if isinstance(holder, cst.Arg):
            users.append(self.index.parent(holder))  # type: ignore[arg-type]
        elif (
            isinstance(holder, cst.Assign)
            and len(holder.targets) == 1
            and isinstance(holder.targets[0].target, cst.Name)
        ):
            name = holder.targets[0].target.value
            scope = self.index.enclosing(holder, cst.FunctionDef)
            for node in self.ctx.nodes(cst.Call):
                if (
                    node.args
                    and isinstance(node.args[0].value, cst.Name)
                    and node.args[0].value.value == name
                    and self.index.enclosing(node, cst.FunctionDef) is scope
                ):
                    users.append(node)
        for user in users:
            if not isinstance(user, cst.Call) or not self.is_tree_map(user):
                continue
            trees = [self.code(a.value) for a in user.args[1:] if a.keyword is None]
            if any(is_averaged_name(t) for t in trees) and not any(
                w in NOT_WEIGHT_TOKENS for t in trees for w in tokens(t)
            ):
                return True
        return False

    def _tree_map(self, call: cst.Call) -> InPlaceUpdate | None:
        """JAX: ``jax.tree.map(lambda e, p: d * e + (1 - d) * p, ema_params, params)``
        (``tree_util.tree_map``, ``tree_multimap``): a functional update whose shadow is the
        tree named as an average, its source the other tree."""
        if not self.is_tree_map(call):
            return None
        args = [a for a in call.args if a.keyword is None and not a.star]
        if len(args) != 3:
            return None
        mapped = self._mapped_function(call, args[0].value)
        if mapped is None:
            return None
        params, body = mapped
        trees = {params[0]: args[1].value, params[1]: args[2].value}
        averaged = [p for p in params if is_averaged_name(self.code(trees[p]))]
        if len(averaged) != 1:
            return None
        shadow_param = averaged[0]
        source_param = params[1] if shadow_param == params[0] else params[0]
        weights: dict[str, Coefficient] = {}
        away = False
        terms = _terms(body)
        if terms is not None and len(terms) == 2:
            for tensor, coefficient in terms:
                bare = strip_tensor(tensor)
                if isinstance(bare, cst.Name) and bare.value in trees:
                    weights[bare.value] = Coefficient(coefficient)
        else:
            step = _tree_difference(body, shadow_param, source_param)
            if step is not None:
                k, away = step
                weights = {shadow_param: Coefficient(k, True), source_param: Coefficient(k)}
        if len(weights) != 2:
            return None
        return InPlaceUpdate(
            call,
            trees[shadow_param],
            trees[source_param],
            weights[shadow_param],
            weights[source_param],
            "tree_map",
            shadow_container=trees[shadow_param],
            source_container=trees[source_param],
            away=away,
        )

    def _mapped_function(
        self, call: cst.Call, func: cst.BaseExpression
    ) -> tuple[list[str], cst.BaseExpression] | None:
        """The two parameters and the returned expression of what a tree map applies: a
        ``lambda e, p: ...``, or a function of the module whose body returns one expression
        (``def avg(e, p): return d * e + (1 - d) * p``)."""
        if isinstance(func, cst.Lambda):
            parameters, body = func.params, func.body
        elif isinstance(func, cst.Name):
            scope = self.index.enclosing(call, cst.FunctionDef, cst.ClassDef)
            candidates = [
                f
                for f in self.index.functions_named(func.value)
                if self.index.enclosing(f, cst.FunctionDef, cst.ClassDef) in (scope, None)
                and not self.index.contains(f, call)
            ]
            if len(candidates) != 1:
                return None
            definition = candidates[0]
            returns = [
                r
                for r in self.index.descendants(definition, cst.Return)
                if isinstance(r, cst.Return)
                and self.index.enclosing(r, cst.FunctionDef) is definition
            ]
            if len(returns) != 1 or returns[0].value is None:
                return None
            parameters, body = definition.params, returns[0].value
        else:
            return None
        if parameters.star_arg not in (None, cst.MaybeSentinel.DEFAULT) or parameters.kwonly_params:
            return None
        names = [p.name.value for p in (*parameters.posonly_params, *parameters.params)]
        if len(names) != 2:
            return None
        return names, body

    def _scaled_difference(
        self, call: cst.Call, name: cst.Name
    ) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
        """``tmp = s - p`` then ``tmp.mul_(k)`` just before ``s.sub_(tmp)``: (s - p, k)."""
        before = self._previous_statement(call)
        if not (
            isinstance(before, cst.Expr)
            and isinstance(before.value, cst.Call)
            and isinstance(before.value.func, cst.Attribute)
            and before.value.func.attr.value == "mul_"
            and len(before.value.args) == 1
            and isinstance(before.value.func.value, cst.Name)
            and before.value.func.value.value == name.value
        ):
            return []
        diff = self._assigned_before(call, name.value)
        if diff is None:
            return []
        return [(diff, before.value.args[0].value)]

    # ``AveragedModel(model, avg_fn=f)``: ``f(averaged, current, num_averaged)`` -----------------
    def _avg_fn(self, call: cst.Call) -> InPlaceUpdate | None:
        """The function a call hands to ``AveragedModel`` as its ``avg_fn`` (a lambda, or a
        function or lambda bound to a name), when it returns a two-term average of its first
        two parameters: the API passes the averaged tensor first and the live one second,
        so the position says which is the shadow, whatever the parameters are called
        (``lambda a, m, n: 0.1 * a + 0.9 * m``, copied from an old documentation example,
        keeps 0.1 of the average)."""
        given = self._avg_fn_argument(call)
        if given is None:
            return None
        mapped = self._averaging_function(call, given)
        if mapped is None:
            return None
        node, (shadow, source), body = mapped
        sides: dict[str, tuple[cst.BaseExpression, Coefficient]] = {}
        away = False
        terms = _terms(body)
        lerp = _lerp_of(body) if isinstance(body, cst.Call) else None
        if terms is not None and len(terms) == 2:
            for tensor, coefficient in terms:
                bare = strip_tensor(tensor)
                if isinstance(bare, cst.Name) and bare.value in (shadow, source):
                    sides[bare.value] = (tensor, Coefficient(coefficient))
        elif lerp is not None:
            start, end, weight = lerp
            if _is_param(start, shadow) and _is_param(end, source):
                sides = {
                    shadow: (start, Coefficient(weight, True)),
                    source: (end, Coefficient(weight)),
                }
        else:
            step = _tree_difference(body, shadow, source)
            if step is not None:
                k, away = step
                named = {
                    n.value: n
                    for n in self.index.descendants(body, cst.Name)
                    if isinstance(n, cst.Name)
                }
                if shadow in named and source in named:
                    sides = {
                        shadow: (named[shadow], Coefficient(k, True)),
                        source: (named[source], Coefficient(k)),
                    }
        if len(sides) != 2:
            return None
        return InPlaceUpdate(
            node,
            sides[shadow][0],
            sides[source][0],
            sides[shadow][1],
            sides[source][1],
            "avg_fn",
            away=away,
            owner=call,
        )

    def _avg_fn_argument(self, call: cst.Call) -> cst.BaseExpression | None:
        """``avg_fn=`` of any call, the third positional argument of ``AveragedModel(...)``,
        or of ``super().__init__(...)`` in a subclass of it (torchvision's
        ``ExponentialMovingAverage``)."""
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "avg_fn":
                return arg.value
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if len(positional) < 3:
            return None
        name = dotted_name(call.func) or ""
        if name.rsplit(".", 1)[-1] == "AveragedModel":
            return positional[2].value
        if (
            isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "__init__"
            and isinstance(call.func.value, cst.Call)
            and dotted_name(call.func.value.func) == "super"
        ):
            cls = self.index.enclosing(call, cst.ClassDef)
            if isinstance(cls, cst.ClassDef) and any(
                (dotted_name(b.value) or "").rsplit(".", 1)[-1] == "AveragedModel"
                for b in cls.bases
            ):
                return positional[2].value
        return None

    def function_seen_from(self, node: cst.CSTNode, name: str) -> cst.FunctionDef | None:
        """The one function called ``name`` defined in a scope that encloses ``node`` (or
        at module level), not around ``node`` itself; None when there is none or several."""
        scopes = set()
        scope = self.index.enclosing(node, cst.FunctionDef, cst.ClassDef)
        while scope is not None:
            scopes.add(id(scope))
            scope = self.index.enclosing(scope, cst.FunctionDef, cst.ClassDef)
        candidates = [
            f
            for f in self.index.functions_named(name)
            if not self.index.contains(f, node)
            and (
                (outer := self.index.enclosing(f, cst.FunctionDef, cst.ClassDef)) is None
                or id(outer) in scopes
            )
        ]
        return candidates[0] if len(candidates) == 1 else None

    def _averaging_function(
        self, call: cst.Call, given: cst.BaseExpression
    ) -> tuple[cst.CSTNode, tuple[str, str], cst.BaseExpression] | None:
        """The node to report, the first two parameters and the returned expression of a
        lambda, a lambda bound once to a name, or a function of the enclosing scopes with
        one ``return``."""
        function: cst.Lambda | cst.FunctionDef | None = None
        if isinstance(given, cst.Lambda):
            function = given
        elif isinstance(given, cst.Name):
            value = self.resolver.assigned_value(given)
            if isinstance(value, cst.Lambda):
                function = value
            else:
                function = self.function_seen_from(call, given.value)
        if function is None:
            return None
        names = positional_names(function)
        if len(names) < 2 or len(names) > 3:
            return None
        if isinstance(function, cst.Lambda):
            return function.body, (names[0], names[1]), function.body
        returns = [
            r
            for r in self.index.descendants(function, cst.Return)
            if isinstance(r, cst.Return) and self.index.enclosing(r, cst.FunctionDef) is function
        ]
        if len(returns) != 1 or returns[0].value is None:
            return None
        return returns[0], (names[0], names[1]), returns[0].value

    def _returned(self, node: cst.Return) -> InPlaceUpdate | None:
        """``def ema(ema_value, value, decay): return ema_value * decay + value * (1 - decay)``:
        a functional update of two parameters of the function, one named as the average."""
        function = self.index.enclosing(node, cst.FunctionDef, cst.Lambda)
        if not isinstance(function, cst.FunctionDef) or node.value is None:
            return None
        terms = _terms(node.value)
        if terms is None or len(terms) != 2:
            return None
        params = {p.name.value for p in function.params.params}
        tensors = [strip_tensor(t) for t, _ in terms]
        if not all(isinstance(t, cst.Name) and t.value in params for t in tensors):
            return None
        names = [t.value for t in tensors]  # type: ignore[attr-defined]
        averaged = [i for i, n in enumerate(names) if is_averaged_name(n)]
        if len(averaged) != 1 or names[0] == names[1]:
            return None
        shadow, source = averaged[0], 1 - averaged[0]
        return InPlaceUpdate(
            node,
            terms[shadow][0],
            terms[source][0],
            Coefficient(terms[shadow][1]),
            Coefficient(terms[source][1]),
            "returned",
        )

    def _foreach(self, call: cst.Call, name: str) -> InPlaceUpdate | None:
        if len(call.args) < 2:
            return None
        shadow, source = call.args[0].value, call.args[1].value
        if name.endswith("_foreach_lerp_"):
            weight = _arg(call, 2, "weight")
            if weight is None:
                return None
            return self._make(
                call, shadow, source, Coefficient(weight, True), Coefficient(weight), "foreach"
            )
        alpha = _arg(call, 2, "alpha")
        if alpha is None:
            return None
        old: Coefficient | None = None
        first: cst.Call | None = None
        before = self._previous_statement(call)
        if isinstance(before, cst.Expr) and isinstance(before.value, cst.Call):
            mul = before.value
            if (
                isinstance(mul.func, cst.Attribute)
                and mul.func.attr.value == "_foreach_mul_"
                and len(mul.args) >= 2
                and self._same(mul.args[0].value, shadow)
            ):
                old, first = Coefficient(mul.args[1].value), mul
        return self._make(call, shadow, source, old, Coefficient(alpha), "foreach", first=first)

    # Assignments --------------------------------------------------------------------------------
    def _from_assign(self, node: cst.Assign) -> InPlaceUpdate | None:
        if len(node.targets) != 1 or not isinstance(
            node.value, (cst.BinaryOperation, cst.Call, cst.Name)
        ):
            return None
        target = node.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
            return None
        found = None
        if not isinstance(node.value, cst.Name):
            found = self._combination(node, target, node.value, "assign")
        if found is None and not isinstance(node.value, cst.Name):
            found = self._out_of_place(node, target)
        if found is None:
            found = self._through_temp(node, target, node.value, "assign")
        return found

    def _from_augassign(self, node: cst.AugAssign) -> InPlaceUpdate | None:
        """``e -= (1 - d) * (e - p)`` (TF's formula), ``e += k * (p - e)``; or ``e *= d``
        followed by ``e += (1 - d) * p``."""
        target = node.target
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
            return None
        operator = node.operator
        if not isinstance(operator, (cst.AddAssign, cst.SubtractAssign)):
            return None
        sign = 1 if isinstance(operator, cst.AddAssign) else -1
        value = node.value
        step = self._scaled_step(node, target, value, sign, "augassign")
        if step is not None:
            return step
        if sign < 0:
            return None
        terms = _terms(value)
        if not terms or len(terms) != 1:
            return None
        before = self._previous_statement(node)
        if (
            isinstance(before, cst.AugAssign)
            and isinstance(before.operator, cst.MultiplyAssign)
            and self._same(before.target, target)
        ):
            source, weight = terms[0]
            return self._make(
                node, target, source, Coefficient(before.value), Coefficient(weight), "augassign"
            )
        scaled = self._scaled_rebind(before, target)
        if scaled is not None:
            assert isinstance(before, cst.Assign)
            source, weight = terms[0]
            return self._make(
                node,
                target,
                source,
                Coefficient(scaled),
                Coefficient(weight),
                "augassign",
                rebind=before,
            )
        return None

    def _scaled_step(
        self,
        node: cst.CSTNode,
        target: cst.BaseExpression,
        value: cst.BaseExpression,
        sign: int,
        form: str,
    ) -> InPlaceUpdate | None:
        """``k * (e - p)`` (or ``(p - e) * k``) added to the target with ``sign``: the
        difference form of the update (``e -= k * (e - p)``, ``e = e + k * (p - e)``), k
        the weight on the new value; the other sign moves away from ``p``."""
        if not (
            isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)
        ):
            return None
        for diff, k in ((value.left, value.right), (value.right, value.left)):
            sides = self._difference_sides(diff, target, sign)
            if sides is None:
                continue
            source, toward = sides
            return self._make(
                node,
                target,
                source,
                Coefficient(k, True),
                Coefficient(k),
                form,
                away=not toward,
            )
        return None

    def _difference_sides(
        self, diff: cst.BaseExpression, target: cst.BaseExpression, sign: int
    ) -> tuple[cst.BaseExpression, bool] | None:
        """For ``target ± k * diff`` with ``diff`` a difference of ``target`` and another
        tensor: (that tensor, whether the step moves ``target`` toward it); None otherwise."""
        if not (isinstance(diff, cst.BinaryOperation) and isinstance(diff.operator, cst.Subtract)):
            return None
        if self._same(diff.left, target) and not self._same(diff.right, target):
            return diff.right, sign < 0
        if self._same(diff.right, target) and not self._same(diff.left, target):
            return diff.left, sign > 0
        return None

    def _scaled_rebind(
        self, before: cst.BaseSmallStatement | None, target: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        """``e = e * d`` (or ``e.mul(d)``) just before: the decay it scales ``e`` by."""
        if not (
            isinstance(before, cst.Assign)
            and len(before.targets) == 1
            and isinstance(target, cst.Name)
            and isinstance(before.targets[0].target, cst.Name)
            and before.targets[0].target.value == target.value
        ):
            return None
        value = before.value
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply):
            for tensor, weight in ((value.left, value.right), (value.right, value.left)):
                if self._same(tensor, target) and _is_scalar_like(weight):
                    return weight
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("mul", "mul_")
            and len(value.args) == 1
            and self._same(value.func.value, target)
        ):
            return value.args[0].value
        return None

    def _scaled_before(
        self, node: cst.CSTNode, target: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        """``e *= d`` or ``e.mul_(d)`` as the statement just before: the decay."""
        before = self._previous_statement(node)
        if (
            isinstance(before, cst.AugAssign)
            and isinstance(before.operator, cst.MultiplyAssign)
            and self._same(before.target, target)
        ):
            return before.value
        if isinstance(before, cst.Expr) and isinstance(before.value, cst.Call):
            mul = before.value
            if (
                isinstance(mul.func, cst.Attribute)
                and mul.func.attr.value == "mul_"
                and len(mul.args) == 1
                and self._same(mul.func.value, target)
            ):
                return mul.args[0].value
        return None

    def _out_of_place(self, node: cst.Assign, target: cst.BaseExpression) -> InPlaceUpdate | None:
        """``e = e.mul(d).add(p, alpha=1 - d)``, ``e = e.sub((1 - d) * (e - p))``,
        ``e = e - (1 - d) * (e - p)``, and ``e = e + (1 - d) * p`` after ``e *= d``: an
        update computed out of place and bound to the shadow's name."""
        value = node.value
        if (
            isinstance(value, cst.BinaryOperation)
            and isinstance(value.operator, (cst.Add, cst.Subtract))
            and isinstance(strip_tensor(value.left), cst.Name)
            and self._same(value.left, target)
        ):
            # ``e = e - (1 - d) * (e - p)``: the difference form, bound to the name.
            sign = 1 if isinstance(value.operator, cst.Add) else -1
            step = self._scaled_step(node, target, value.right, sign, "assign")
            if step is not None:
                return step
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add):
            for bare, term in ((value.left, value.right), (value.right, value.left)):
                if not isinstance(strip_tensor(bare), cst.Name) or not self._same(bare, target):
                    continue
                terms = _terms(term)
                decay = self._scaled_before(node, target)
                if terms and len(terms) == 1 and decay is not None:
                    source, weight = terms[0]
                    return self._make(
                        node, target, source, Coefficient(decay), Coefficient(weight), "assign"
                    )
            return None
        return self._out_of_place_chain(node, value, target)

    def _out_of_place_chain(
        self, node: cst.CSTNode, value: cst.BaseExpression, target: cst.BaseExpression
    ) -> InPlaceUpdate | None:
        """``target.mul(d).add(p, alpha=1 - d)``, ``target.sub(k * (target - p))``: an
        update computed out of place by a chain of calls on ``target``."""
        ops: list[tuple[str, cst.Call]] = []
        expr: cst.BaseExpression = value
        while (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value.rstrip("_") in ("mul", "add", "sub")
        ):
            ops.append((expr.func.attr.value.rstrip("_"), expr))
            expr = expr.func.value
        ops.reverse()
        if not ops or not self._same(expr, target):
            return None
        methods = [m for m, _ in ops]
        if methods == ["mul", "add"] and ops[0][1].args:
            source, new = self._added(ops[1][1])
            if source is None:
                return None
            old = Coefficient(ops[0][1].args[0].value)
            return self._make(node, target, source, old, new, "assign")
        if methods in (["add"], ["sub"]):
            found = self._difference(
                ops[0][1], target, 1 if methods == ["add"] else -1, "assign", node
            )
            if found is None and methods == ["add"]:
                # ``e.add_(-k * e)`` then ``e = e.add(k * p)``: the second half rebound.
                shrink = self._shrink(self._previous_statement(node), target)
                if shrink is not None and not shrink[2]:
                    source, new = self._added_share(ops[0][1], shrink[1].expr)
                    if source is not None and not self._same(source, target):
                        first = shrink[0] if isinstance(shrink[0], cst.Call) else None
                        return self._make(
                            node, target, source, shrink[1], new, "assign", first=first
                        )
            return found
        return None

    # Result -----------------------------------------------------------------------------------
    def _make(
        self,
        node: cst.CSTNode,
        shadow: cst.BaseExpression,
        source: cst.BaseExpression | None,
        old: Coefficient | None,
        new: Coefficient | None,
        form: str,
        *,
        away: bool = False,
        first: cst.Call | None = None,
        temp: cst.Assign | None = None,
        rebind: cst.Assign | None = None,
    ) -> InPlaceUpdate:
        loop, shadow_side, source_side = self._loop_binding(node, shadow, source)
        return InPlaceUpdate(
            node,
            shadow,
            source,
            old,
            new,
            form,
            loop,
            shadow_side[0],
            source_side[0],
            shadow_side[1],
            source_side[1],
            away,
            first,
            temp,
            rebind,
        )

    def _loop_binding(
        self, node: cst.CSTNode, shadow: cst.BaseExpression, source: cst.BaseExpression | None
    ) -> tuple[cst.For | None, _Side, _Side]:
        """The ``for e, p in zip(X..., Y...)`` binding the two tensors, and what X and Y are
        (the container and the method iterated)."""
        none: _Side = (None, None)
        shadow_name = _root_name(strip_tensor(shadow))
        source_name = _root_name(uncast(strip_tensor(source))) if source is not None else None
        source_side = self._subscript_side(source)
        if source_side[1] is None and source is not None:
            # ``p_src = src_params[name]`` earlier in the block: the source is that entry;
            # ``p_data = p.data``: the source is the loop's ``p``.
            bare = uncast(strip_tensor(source))
            earlier = (
                self._assigned_before(node, bare.value) if isinstance(bare, cst.Name) else None
            )
            if isinstance(earlier, cst.Subscript):
                source_side = self._subscript_side(earlier)
            elif isinstance(earlier, cst.Name):
                source_name = earlier.value
        for ancestor in self.index.ancestors(node):
            if not isinstance(ancestor, cst.For):
                continue
            bound = _for_targets(ancestor)
            if shadow_name not in bound:
                continue
            iterable = ancestor.iter
            if (
                isinstance(iterable, cst.Call)
                and dotted_name(iterable.func) == "zip"
                and len(iterable.args) >= 2
            ):
                positions = _zip_positions(ancestor.target)
                sides = [
                    self._container(a.value, 0)
                    for a in iterable.args
                    if a.keyword is None and not a.star
                ]
                shadow_s: _Side = none
                source_s: _Side = source_side
                if shadow_name in positions and positions[shadow_name] < len(sides):
                    shadow_s = sides[positions[shadow_name]]
                if (
                    source_name is not None
                    and source_name in positions
                    and positions[source_name] < len(sides)
                ):
                    source_s = sides[positions[source_name]]
                return ancestor, shadow_s, source_s
            return ancestor, self._container(iterable, 0), source_side
        stripped = strip_tensor(shadow)
        if isinstance(stripped, cst.Name):
            # ``s = ema_sd[name]`` earlier in the block: the update is of that entry.
            alias = self._alias(node, stripped.value)
            if alias is not None:
                stripped = alias
        if isinstance(stripped, cst.Subscript):
            shadow_s = self._subscript_side(stripped)
            if shadow_s[1] is None:
                shadow_s = (container_of(stripped.value), None)
            # ``for name, p in model.named_parameters(): shadow[name]...``: the loop that
            # binds the source.
            if source_name is not None:
                for ancestor in self.index.ancestors(node):
                    if isinstance(ancestor, cst.For) and source_name in _for_targets(ancestor):
                        if source_side[1] is None:
                            source_side = self._container(ancestor.iter, 0)
                        return ancestor, shadow_s, source_side
            return None, shadow_s, source_side
        if isinstance(shadow, (cst.Name, cst.Attribute, cst.Call)) and source is not None:
            # ``torch._foreach_lerp_(ema_params, params, w)``: lists built from the weights.
            shadow_s = self._container(shadow, 0)
            source_s = self._container(source, 0)
            if shadow_s[1] is not None or source_s[1] is not None:
                return None, shadow_s, source_s
        return None, none, source_side

    def _alias(self, node: cst.CSTNode, name: str) -> cst.Subscript | None:
        """``name = X[k]`` (or ``X[k].data``) as an earlier statement of the same block."""
        value = self._assigned_before(node, name)
        return value if isinstance(value, cst.Subscript) else None

    def _assigned_before(self, node: cst.CSTNode, name: str) -> cst.BaseExpression | None:
        """The value (tensor accessors stripped) of the last ``name = value`` before
        ``node``'s statement in the same block; None when there is none."""
        statement = self.index.statement(node)
        block = self.index.parent(statement) if statement is not None else None
        body = getattr(block, "body", None)
        position = self.index.body_position(statement) if statement is not None else None
        if not isinstance(body, (list, tuple)) or position is None:
            return None
        for before in reversed(list(body)[:position]):
            if not isinstance(before, cst.SimpleStatementLine):
                continue
            for small in before.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == name
                ):
                    return strip_tensor(small.value)
        return None

    def _subscript_side(self, node: cst.BaseExpression | None) -> _Side:
        """``msd[k]`` with ``msd = model.state_dict()``: (model, "state_dict")."""
        node = strip_tensor(node) if node is not None else None
        if not isinstance(node, cst.Subscript):
            return (None, None)
        container, method = self._container(node.value, 0)
        if method is None:
            return (None, None)
        return container, method

    def _container(
        self, expr: cst.BaseExpression, depth: int
    ) -> tuple[cst.BaseExpression, str | None]:
        node = expr
        while (
            isinstance(node, cst.Call)
            and dotted_name(node.func) in _WRAPPING
            and len(node.args) == 1
            and node.args[0].keyword is None
            and not node.args[0].star
        ):
            node = node.args[0].value
        if isinstance(node, (cst.ListComp, cst.GeneratorExp, cst.DictComp)):
            clause = node.for_in
            element = node.value if isinstance(node, cst.DictComp) else node.elt
            if clause.inner_for_in is not None or _copies(element):
                return expr, None
            element = strip_tensor(element)
            if isinstance(element, cst.Name) and element.value in _names_in(clause.target):
                found, method = self._container(clause.iter, depth + 1)
                if method is not None:
                    return found, method
            return expr, None
        method = _method_of(node)
        if method is not None:
            return container_of(node), method
        if isinstance(node, cst.Call):
            helper = self._helper_weights(node)
            if helper is not None:
                arg, method, fresh = helper
                return (expr if fresh else arg), method
            func = node.func
            if (
                depth < self.MAX_DEPTH
                and isinstance(func, cst.Attribute)
                and func.attr.value in ("items", "values")
                and not node.args
                and (
                    isinstance(func.value, (cst.Name, cst.Attribute))
                    or (
                        isinstance(func.value, cst.Call)
                        and dotted_name(func.value.func) in _WRAPPING
                    )
                )
            ):
                found, method = self._container(func.value, depth + 1)  # sd.items()
                if method is not None:
                    return found, method
        if depth < self.MAX_DEPTH and isinstance(node, (cst.Name, cst.Attribute)):
            value = self.resolver.assigned_value(node)
            if isinstance(value, cst.Call):
                helper = self._helper_weights(value)
                if helper is not None and helper[2]:
                    return node, helper[1]  # a fresh dict of the weights: its own container
            if value is not None:
                found, method = self._container(value, depth + 1)
                if method is not None:
                    return found, method
        if isinstance(node, cst.Name) and self._annotated_parameters(node):
            return node, "parameters"
        if depth < self.MAX_DEPTH and isinstance(node, cst.Name):
            appended = self._appended(node, depth)
            if appended is not None:
                return appended
        return container_of(expr), None

    def _appended(self, name: cst.Name, depth: int) -> tuple[cst.BaseExpression, str | None] | None:
        """A list the function fills with ``name.append(v)`` in a loop over a model's weights
        (``for k, v in ema.state_dict().items(): ema_v.append(v)``): that model and method,
        whatever the list goes through afterwards (``self._pairs = ema_v, model_v`` then
        ``ema_v, model_v = self._pairs``); a list of copies is its own container."""
        scope = self._scope_of(name)
        key = (id(scope), name.value)
        if key in self._appends:
            return self._appends[key]
        self._appends[key] = None  # a list appended from itself stays unknown
        sides: list[tuple[cst.BaseExpression, str | None]] = []
        root = scope if scope is not None else self.ctx.module
        for call in self.index.descendants(root, cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if not (
                isinstance(func, cst.Attribute)
                and func.attr.value == "append"
                and isinstance(func.value, cst.Name)
                and func.value.value == name.value
                and len(call.args) == 1
                and self._scope_of(call) is scope
            ):
                continue
            value = call.args[0].value
            if _copies(value):
                sides.append((name, None))
                continue
            element = strip_tensor(value)
            side: tuple[cst.BaseExpression, str | None] = (None, None)  # type: ignore[assignment]
            if isinstance(element, cst.Subscript):
                side = self._subscript_side(element)
            elif isinstance(element, cst.Name):
                for loop in self.index.ancestors(call):
                    if isinstance(loop, cst.For) and element.value in _for_targets(loop):
                        side = self._container(loop.iter, depth + 1)
                        break
            if side[1] is None:
                return None
            sides.append(side)
        if not sides or any(
            method != sides[0][1] or self.code(found) != self.code(sides[0][0])
            for found, method in sides
        ):
            return None
        self._appends[key] = sides[0]
        return sides[0]

    def _annotated_parameters(self, name: cst.Name) -> bool:
        """``def update(self, parameters: Iterable[torch.nn.Parameter])``: the helper's
        argument is annotated as model parameters (kept when the helper rebinds the name from
        a call on it, ``parameters = self._get_parameters(parameters)``)."""
        function = self.index.enclosing(name, cst.FunctionDef)
        if function is None:
            return False
        params = function.params
        for param in all_params(params):
            if param.name.value != name.value or param.annotation is None:
                continue
            text = self.code(param.annotation.annotation)
            return "Parameter" in text and "Tensor" not in text
        return False

    def _helper_weights(self, call: cst.Call) -> tuple[cst.BaseExpression, str, bool] | None:
        """``extract(model, rank)`` where ``extract`` is a function of the module that
        returns a dict or list it fills from a parameter's weights (``for k, v in
        model.named_parameters(): out[k] = v.cpu()``): the argument passed for that
        parameter, the weight method, and whether the entries are new tensors (copies,
        casts) rather than the model's own."""
        if not isinstance(call.func, cst.Name):
            return None
        function = self._module_functions().get(call.func.value)
        if function is None or self.index.contains(function, call):
            return None
        returned = [
            r.value
            for r in self.index.descendants(function, cst.Return)
            if isinstance(r, cst.Return) and r.value is not None
        ]
        if len(returned) != 1 or not isinstance(returned[0], cst.Name):
            return None
        result = returned[0].value
        params = [p.name.value for p in function.params.params]
        for loop in self.index.descendants(function, cst.For):
            assert isinstance(loop, cst.For)
            method = _method_of(loop.iter)
            base = container_of(loop.iter)
            if method is None or not isinstance(base, cst.Name) or base.value not in params:
                continue
            filled = self._fills(loop, result)
            if filled is None:
                continue
            position = params.index(base.value)
            fresh = not (isinstance(filled, cst.Name) and filled.value in _for_targets(loop))
            if fresh and self._without_grad(function, filled):
                method = "state_dict"  # detached copies: weight values that record no graph
            for index, arg in enumerate(call.args):
                if arg.star:
                    return None
                keyword = arg.keyword.value if arg.keyword is not None else None
                if keyword == base.value or (keyword is None and index == position):
                    return arg.value, method, fresh
        return None

    def helper_entries(self, call: cst.Call) -> cst.BaseExpression | None:
        """For a call of a module function that fills a dict or list from a parameter's
        weights (see ``_helper_weights``), what it stores per entry (``v.cpu().half()``)."""
        if self._helper_weights(call) is None:
            return None
        assert isinstance(call.func, cst.Name)
        function = self._module_functions()[call.func.value]
        returned = next(
            r.value for r in self.index.descendants(function, cst.Return) if r.value is not None
        )
        assert isinstance(returned, cst.Name)
        for loop in self.index.descendants(function, cst.For):
            assert isinstance(loop, cst.For)
            filled = self._fills(loop, returned.value)
            if filled is not None:
                return filled
        return None

    def _without_grad(self, function: cst.FunctionDef, value: cst.BaseExpression) -> bool:
        """The helper's entries carry no autograd history: detached, or made under
        ``no_grad`` / ``inference_mode`` (a decorator or a ``with`` block)."""
        node: cst.BaseExpression = value
        while True:
            if isinstance(node, cst.Attribute):
                if node.attr.value == "data":
                    return True
                node = node.value
            elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
                if node.func.attr.value == "detach":
                    return True
                node = node.func.value
            else:
                break
        guards = [self.code(d.decorator) for d in function.decorators]
        guards.extend(
            self.code(item.item)
            for with_ in self.index.descendants(function, cst.With)
            if isinstance(with_, cst.With) and self.index.contains(with_, value)
            for item in with_.items
        )
        return any("no_grad" in g or "inference_mode" in g for g in guards)

    def _fills(self, loop: cst.For, result: str) -> cst.BaseExpression | None:
        """What the loop writes into ``result`` (``result[k] = x``, ``result.append(x)``):
        ``x``, or None when it writes nothing there."""
        for node in self.index.descendants(loop.body, (cst.Assign, cst.Call)):
            if isinstance(node, cst.Assign):
                target = node.targets[0].target
                if (
                    isinstance(target, cst.Subscript)
                    and isinstance(target.value, cst.Name)
                    and target.value.value == result
                ):
                    return node.value
            elif (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value == "append"
                and isinstance(node.func.value, cst.Name)
                and node.func.value.value == result
                and node.args
            ):
                return node.args[0].value
        return None

    def _module_functions(self) -> dict[str, cst.FunctionDef]:
        if self._functions is None:
            self._functions = {
                f.name.value: f
                for f in self.ctx.nodes(cst.FunctionDef)
                if isinstance(f, cst.FunctionDef) and isinstance(self.index.parent(f), cst.Module)
            }
        return self._functions

    # What becomes of the result ---------------------------------------------------------------
    def _dead_name(self, assign: cst.Assign, name: cst.Name) -> str | None:
        scope = self.index.enclosing(assign, cst.FunctionDef, cst.Lambda, cst.ClassDef)
        if isinstance(scope, (cst.Lambda, cst.ClassDef)):
            return None
        for declaration in (*self.ctx.nodes(cst.Global), *self.ctx.nodes(cst.Nonlocal)):
            if self.index.enclosing(declaration, cst.FunctionDef) is scope and any(
                item.name.value == name.value
                for item in declaration.names  # type: ignore[attr-defined]
            ):
                return None
        kind = self._previous_binding(assign, name.value, scope)
        if kind is None:
            return None
        if self._read_after(assign, name.value, scope):
            return None
        return kind

    def _dead_rebind(self, update: InPlaceUpdate, rebind: cst.Assign) -> str | None:
        """``e = e * d`` then ``e += (1 - d) * p``: the second half lands on the new tensor,
        dead when nothing but the update reads the name afterwards."""
        target = rebind.targets[0].target
        assert isinstance(target, cst.Name)
        scope = self.index.enclosing(rebind, cst.FunctionDef, cst.Lambda, cst.ClassDef)
        if isinstance(scope, (cst.Lambda, cst.ClassDef)):
            return None
        kind = self._previous_binding(rebind, target.value, scope)
        if kind is None:
            return None
        if self._read_after(rebind, target.value, scope, skip=update.node):
            return None
        return kind

    def _previous_binding(
        self, assign: cst.Assign, name: str, scope: cst.CSTNode | None
    ) -> str | None:
        """How ``name`` was bound before ``assign``: the enclosing ``for`` (no other loop in
        between), a ``name = X[...]`` / ``X.attr`` earlier in the same block, or a parameter
        of the function (outside any loop)."""
        loops_between = False
        for ancestor in self.index.ancestors(assign):
            if ancestor is scope:
                break
            if isinstance(ancestor, cst.For) and name in _names_in(ancestor.target):
                return None if loops_between else "loop variable"
            if isinstance(ancestor, (cst.For, cst.While)):
                loops_between = True
        earlier = self._assigned_before(assign, name)
        if earlier is not None:
            return "local name" if isinstance(earlier, (cst.Subscript, cst.Attribute)) else None
        if isinstance(scope, cst.FunctionDef) and not loops_between:
            params = scope.params
            every = all_params(params)
            if any(p.name.value == name for p in every):
                return "local name"
        return None

    def _read_after(
        self,
        assign: cst.Assign,
        name: str,
        scope: cst.CSTNode | None,
        skip: cst.CSTNode | None = None,
    ) -> bool:
        """Whether ``name`` is read after ``assign`` before it is bound again (reads inside
        ``skip``, the rest of the update, aside)."""
        statement = self.index.statement(assign) or assign
        root = scope if scope is not None else self.ctx.module
        events = [
            n
            for n in self.index.descendants(root, cst.Name)
            if n.value == name  # type: ignore[attr-defined]
            and self.index.is_before(statement, n)
            and not self.index.contains(statement, n)
            and self._scope_of(n) is scope
        ]
        for occurrence in events:
            if skip is not None and self.index.contains(skip, occurrence):
                continue
            if self._other_branch(statement, occurrence):
                continue  # ``if ...: e = ... else: e.copy_(...)``: never both
            store = self._is_store(occurrence)
            if store is None:
                continue
            return not store
        return False

    def _other_branch(self, statement: cst.CSTNode, occurrence: cst.CSTNode) -> bool:
        """``occurrence`` is in an ``else``/``elif`` of an ``if`` whose body holds
        ``statement``: the two never run in the same pass."""
        for ancestor in self.index.ancestors(statement):
            if (
                isinstance(ancestor, cst.If)
                and ancestor.orelse is not None
                and self.index.contains(ancestor.body, statement)
                and self.index.contains(ancestor.orelse, occurrence)
            ):
                return True
            # ``try: e = ... except RuntimeError: e.data = p.data``: the handler runs when
            # the update did not.
            if (
                isinstance(ancestor, cst.Try)
                and self.index.contains(ancestor.body, statement)
                and any(self.index.contains(h, occurrence) for h in ancestor.handlers)
            ):
                return True
        return False

    def _scope_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        found = self.index.enclosing(node, cst.FunctionDef, cst.Lambda, cst.ClassDef)
        return found

    def _is_store(self, name: cst.CSTNode) -> bool | None:
        """True for a binding, False for a read, None for neither (a comprehension's own)."""
        child: cst.CSTNode = name
        for parent in self.index.ancestors(name):
            if isinstance(parent, (cst.Tuple, cst.List, cst.StarredElement, cst.Element)):
                child = parent
                continue
            if isinstance(parent, cst.AssignTarget):
                return True
            if isinstance(parent, cst.For) and parent.target is child:
                return True
            if isinstance(parent, cst.CompFor) and parent.target is child:
                return None
            if isinstance(parent, cst.AsName):
                return True
            if isinstance(parent, cst.NamedExpr) and parent.target is child:
                return True
            return isinstance(parent, cst.Del)
        return False

    def _dead_entry(self, target: cst.Subscript) -> str | None:
        """``sd[k] = ...`` on a dict made by ``state_dict()`` that is never loaded back."""
        base = target.value
        if isinstance(base, cst.Call) and _method_of(base) in ("state_dict", "named_parameters"):
            return "state_dict"
        if not isinstance(base, cst.Name):
            return None
        value = self.resolver.assigned_value(base)
        if value is None:
            return None
        inner = value
        if (
            isinstance(inner, cst.Call)
            and isinstance(inner.func, cst.Name)
            and inner.func.value == "dict"
            and len(inner.args) == 1
        ):
            inner = inner.args[0].value
        if not (
            isinstance(inner, cst.Call)
            and isinstance(inner.func, cst.Attribute)
            and inner.func.attr.value in ("state_dict", "named_parameters", "named_buffers")
        ):
            return None
        if inner.func.attr.value != "state_dict" and inner is value:
            return None  # a bare generator of pairs, not a dict
        scope = self.index.enclosing(base, cst.FunctionDef, cst.Lambda, cst.ClassDef)
        root = scope if scope is not None else self.ctx.module
        for occurrence in self.index.descendants(root, cst.Name):
            if occurrence.value != base.value or self._scope_of(occurrence) is not scope:  # type: ignore[attr-defined]
                continue
            if not self._dict_only_use(occurrence):
                return None
        return "state_dict"

    def _dict_only_use(self, name: cst.CSTNode) -> bool:
        """``sd[k]``, ``sd.items()``, ``k in sd``, ``len(sd)``, or the binding itself: uses
        that never hand the dict to anything that could load it."""
        parent = self.index.parent(name)
        if isinstance(parent, cst.Subscript) and parent.value is name:
            return True
        if isinstance(parent, cst.AssignTarget):
            return True
        if isinstance(parent, cst.Attribute) and parent.value is name:
            return parent.attr.value in ("items", "keys", "values", "get")
        if isinstance(parent, cst.ComparisonTarget):
            return True
        if isinstance(parent, cst.Arg):
            call = self.index.parent(parent)
            return isinstance(call, cst.Call) and dotted_name(call.func) == "len"
        return False


_Side = tuple  # (container expression or None, method or None)


def complementary(
    old: Coefficient, new: Coefficient, code: Callable[[cst.CSTNode], str]
) -> str | None:
    """The name both weights are built from when one is the complement of the other
    (``decay`` and ``1 - decay``, or one ``lerp`` weight), else None."""

    def bare(node: cst.BaseExpression) -> tuple[str, bool]:
        complemented = False
        while True:
            if isinstance(node, cst.BinaryOperation) and (
                isinstance(node.operator, cst.Subtract)
                and isinstance(node.left, (cst.Integer, cst.Float))
                and node.left.value in ("1", "1.0", "1.")
            ):
                node, complemented = node.right, not complemented
                continue
            text = code(node).strip()
            while text.startswith("(") and text.endswith(")"):
                text = text[1:-1].strip()
            if text != code(node).strip():
                node = cst.parse_expression(text)
                continue
            return text, complemented

    old_name, old_c = bare(old.expr)
    new_name, new_c = bare(new.expr)
    old_c ^= old.complement
    new_c ^= new.complement
    if old_name != new_name or old_c == new_c:
        return None
    return old_name


def _method_of(node: cst.BaseExpression) -> str | None:
    """The weight method a chain iterates: ``m.state_dict().items()`` -> "state_dict"."""
    while True:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            attr = node.func.attr.value
            if attr in WEIGHT_METHODS:
                return attr
            if attr in ("values", "items"):
                node = node.func.value
                continue
            return None
        if isinstance(node, cst.Attribute) and node.attr.value in (
            "trainable_variables",
            "variables",
        ):
            return node.attr.value
        return None


def _copies(node: cst.BaseExpression) -> bool:
    """The expression makes a new tensor (``p.detach().clone()``, ``deepcopy(v)``)."""
    while True:
        if isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else dotted_name(func)
            if name is not None and name.rsplit(".", 1)[-1] in _COPYING:
                return True
            if isinstance(func, cst.Attribute):
                node = func.value
                continue
            return False
        if isinstance(node, cst.Attribute):
            node = node.value
            continue
        return False


def _tree_difference(
    body: cst.BaseExpression, shadow: str, source: str
) -> tuple[cst.BaseExpression, bool] | None:
    """``e + k * (p - e)`` or ``e - k * (e - p)`` (``e``, ``p`` the mapped function's
    parameters): the weight ``k`` on the new value, and whether the step moves away from
    ``p`` (the other sign)."""
    if not (
        isinstance(body, cst.BinaryOperation)
        and isinstance(body.operator, (cst.Add, cst.Subtract))
        and _is_param(body.left, shadow)
        and isinstance(body.right, cst.BinaryOperation)
        and isinstance(body.right.operator, cst.Multiply)
    ):
        return None
    sign = 1 if isinstance(body.operator, cst.Add) else -1
    product = body.right
    for diff, k in ((product.right, product.left), (product.left, product.right)):
        if not (isinstance(diff, cst.BinaryOperation) and isinstance(diff.operator, cst.Subtract)):
            continue
        if _is_param(diff.left, source) and _is_param(diff.right, shadow):
            return k, sign < 0
        if _is_param(diff.left, shadow) and _is_param(diff.right, source):
            return k, sign > 0
    return None


def _lerp_of(
    call: cst.Call,
) -> tuple[cst.BaseExpression, cst.BaseExpression, cst.BaseExpression] | None:
    """``a.lerp(b, w)`` / ``torch.lerp(a, b, w)``: (start, end, weight)."""
    name = dotted_name(call.func) or ""
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "lerp":
        if name in ("torch.lerp",) and len(args) == 3:
            return args[0], args[1], args[2]
        if len(args) == 2:
            return call.func.value, args[0], args[1]
    return None


def _is_param(node: cst.BaseExpression, name: str) -> bool:
    bare = strip_tensor(node)
    return isinstance(bare, cst.Name) and bare.value == name


def _names_in(target: cst.BaseExpression) -> set[str]:
    found: set[str] = set()

    def walk(node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                walk(element.value)

    walk(target)
    return found


_CASTS = frozenset({"half", "float", "bfloat16", "double", "to", "type"})


def uncast(node: cst.BaseExpression) -> cst.BaseExpression:
    """``v.half()`` / ``v.to(torch.float16)`` -> ``v``: the tensor a cast is of."""
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in _CASTS
    ):
        node = strip_tensor(node.func.value)
    return node


def _root_name(node: cst.BaseExpression | None) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _for_targets(loop: cst.For) -> set[str]:
    return _names_in(loop.target)


def _zip_positions(target: cst.BaseExpression) -> dict[str, int]:
    """``(n, e), (_, p)`` -> {n: 0, e: 0, p: 1}; ``e, p`` -> {e: 0, p: 1}."""
    positions: dict[str, int] = {}
    if not isinstance(target, (cst.Tuple, cst.List)):
        return positions
    for index, element in enumerate(target.elements):
        value = element.value
        if isinstance(value, cst.Name):
            positions[value.value] = index
        elif isinstance(value, (cst.Tuple, cst.List)):
            for inner in value.elements:
                if isinstance(inner.value, cst.Name):
                    positions[inner.value.value] = index
    return positions


def _arg(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position].value if len(positional) > position else None


def _added(call: cst.Call) -> tuple[cst.BaseExpression | None, Coefficient | None]:
    """What ``add_`` adds: ``(p, alpha=a)``, legacy ``(a, p)``, or ``(p * a)``."""
    args = [a for a in call.args if not a.star]
    alpha = next((a.value for a in args if a.keyword and a.keyword.value == "alpha"), None)
    positional = [a.value for a in args if a.keyword is None]
    if alpha is not None and positional:
        return positional[0], Coefficient(alpha)
    if len(positional) == 2:
        return positional[1], Coefficient(positional[0])
    if len(positional) == 1:
        terms = _terms(positional[0])
        if terms and len(terms) == 1:
            tensor, coefficient = terms[0]
            return tensor, Coefficient(coefficient)
        tensor = positional[0]
        if isinstance(strip_tensor(tensor), (cst.Name, cst.Attribute, cst.Subscript)) and not (
            _is_scalar_like(tensor)
        ):
            return tensor, Coefficient(_ONE)  # ``add_(p)``: alpha defaults to 1
    return None, None


_ONE = cst.Integer("1")


def _is_scalar_like(node: cst.BaseExpression) -> bool:
    """A coefficient, not a tensor: a number, ``1 - d``, or a name that reads like a weight."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _is_scalar_like(node.expression)
    if isinstance(node, cst.BinaryOperation):
        return _is_scalar_like(node.left) or _is_scalar_like(node.right)
    if not isinstance(node, (cst.Name, cst.Attribute)):
        return False
    last = (dotted_name(node) or "").rsplit(".", 1)[-1].lower()
    return any(word in last for word in _WEIGHT_WORDS) or last in _SHORT_WEIGHTS


_WEIGHT_WORDS = ("decay", "beta", "alpha", "momentum", "rate", "tau", "polyak", "lambda")
_SHORT_WEIGHTS = {"m", "d", "a", "mu", "rho", "gamma", "w", "k", "lam"}


def _terms(expr: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]] | None:
    """``a*x + b*y`` -> [(x, a), (y, b)]: tensors with their coefficients."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        left = _terms(expr.left)
        right = _terms(expr.right)
        if left is None or right is None:
            return None
        return left + right
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        left, right = expr.left, expr.right
        if _is_scalar_like(left) and not _is_scalar_like(right):
            return [(right, left)]
        if _is_scalar_like(right) and not _is_scalar_like(left):
            return [(left, right)]
        # ``(1 - decay) * w``: both read like weights, but a short name (``w``, ``k``) next
        # to a written coefficient is the tensor (``for ema_w, w in zip(...)``).
        if _scalar_rank(left) > 1 and _scalar_rank(right) == 1:
            return [(right, left)]
        if _scalar_rank(right) > 1 and _scalar_rank(left) == 1:
            return [(left, right)]
        return None
    return None


def _scalar_rank(node: cst.BaseExpression) -> int:
    """How surely an operand is a coefficient: 3, a number or arithmetic on one (``1 - d``);
    2, a name with a weight's word (``decay``); 1, a short name that may be either (``w``);
    0, not a coefficient."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return 3
    if isinstance(node, cst.UnaryOperation):
        return _scalar_rank(node.expression)
    if isinstance(node, cst.BinaryOperation):
        return 3 if max(_scalar_rank(node.left), _scalar_rank(node.right)) == 3 else 0
    if not isinstance(node, (cst.Name, cst.Attribute)):
        return 0
    last = (dotted_name(node) or "").rsplit(".", 1)[-1].lower()
    if any(word in last for word in _WEIGHT_WORDS):
        return 2
    return 1 if last in _SHORT_WEIGHTS else 0
