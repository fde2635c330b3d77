"""Hand-written in-place averaging updates: which tensor is the average, with which weights.

Real code writes the update a dozen ways: ``e.mul_(d).add_(p, alpha=1 - d)``,
``e.lerp_(p, 1 - d)``, ``e.copy_(e * d + p * (1 - d))``, EDM's
``e.copy_(p.detach().lerp(e, beta))``, ``e.data = d * e.data + (1 - d) * p.data``,
``torch._foreach_lerp_(ema_params, params, 1 - d)``, the legacy ``add_(1 - d, p)``, or
``mul_`` and ``add_`` as two statements. This provider recognises them, says which operand
is the shadow (the average being updated) and which the source, and gives the coefficient
of each as an expression (resolve it with ``ValueResolver``), without judging them: the
averaging model uses the shadow to find hand-made EMA copies; the EMA3xx rules judge the
coefficients.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .context import FileContext
from .names import dotted_name

_INPLACE = {"mul_", "add_", "lerp_", "copy_", "sub_"}
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

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.updates: list[InPlaceUpdate] = []
        self._code: dict[int, str] = {}
        for call in ctx.nodes(cst.Call):
            found = self._from_call(call)
            if found is not None:
                self.updates.append(found)
        for assign in ctx.nodes(cst.Assign):
            if not isinstance(assign.value, (cst.BinaryOperation, cst.Call)):
                continue
            found = self._from_assign(assign)
            if found is not None:
                self.updates.append(found)
        self.updates.sort(key=lambda u: self.index.order[id(u.node)])

    @classmethod
    def build(cls, ctx: FileContext) -> InPlaceUpdates:
        return cls(ctx)

    # Helpers --------------------------------------------------------------------------------
    def code(self, node: cst.CSTNode) -> str:
        key = id(node)
        text = self._code.get(key)
        if text is None:
            text = self._code[key] = cst.Module([]).code_for_node(node)
        return text

    def _same(self, a: cst.BaseExpression, b: cst.BaseExpression) -> bool:
        return self.code(strip_tensor(a)) == self.code(strip_tensor(b))

    def _outermost(self, call: cst.Call) -> bool:
        parent = self.index.parent(call)
        if isinstance(parent, cst.Attribute) and parent.value is call:
            grand = self.index.parent(parent)
            if isinstance(grand, cst.Call) and parent.attr.value in _INPLACE:
                return False
        return True

    # Calls ------------------------------------------------------------------------------------
    def _from_call(self, call: cst.Call) -> InPlaceUpdate | None:
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        attr = func.attr.value
        if attr in ("_foreach_lerp_", "_foreach_add_"):
            return self._foreach(call, attr)
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
            source, new = _added(ops[1][1])
            if source is None:
                return None
            old = Coefficient(ops[0][1].args[0].value) if ops[0][1].args else None
            return self._make(call, root, source, old, new, "mul_add")
        if methods == ["add_"]:
            previous = self._previous_mul(call, root)
            if previous is None:
                return None
            source, new = _added(call)
            if source is None:
                return None
            return self._make(call, root, source, Coefficient(previous), new, "mul_add")
        if methods == ["lerp_"] and call.args:
            source = call.args[0].value
            weight = _arg(call, 1, "weight")
            if weight is None:
                return None
            return self._make(
                call, root, source, Coefficient(weight, True), Coefficient(weight), "lerp"
            )
        if methods == ["copy_"] and call.args:
            return self._combination(call, root, call.args[0].value, "copy")
        if methods == ["sub_"] and call.args:
            return self._difference(call, root, call.args[0].value)
        return None

    def _previous_mul(self, call: cst.Call, root: cst.BaseExpression) -> cst.BaseExpression | None:
        """``root.mul_(d)`` as the statement just before the one holding ``call``."""
        statement = self.index.statement(call)
        block = self.index.parent(statement) if statement is not None else None
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)) or statement not in body:
            return None
        position = list(body).index(statement)
        if position == 0:
            return None
        before = body[position - 1]
        if not isinstance(before, cst.SimpleStatementLine) or len(before.body) != 1:
            return None
        expr = before.body[0]
        if not isinstance(expr, cst.Expr) or not isinstance(expr.value, cst.Call):
            return None
        mul = expr.value
        if (
            isinstance(mul.func, cst.Attribute)
            and mul.func.attr.value == "mul_"
            and mul.args
            and self._same(mul.func.value, root)
        ):
            return mul.args[0].value
        return None

    def _combination(
        self, node: cst.CSTNode, target: cst.BaseExpression, expr: cst.BaseExpression, form: str
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
                    node, target, start, Coefficient(weight), Coefficient(weight, True), form
                )
            if self._same(start, target):
                return self._make(
                    node, target, end, Coefficient(weight, True), Coefficient(weight), form
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
        return self._make(node, target, source, Coefficient(old), Coefficient(new), form)

    def _difference(
        self, call: cst.Call, target: cst.BaseExpression, expr: cst.BaseExpression
    ) -> InPlaceUpdate | None:
        """``e.sub_((e - p) * k)``: k is the weight on the new value."""
        if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply)):
            return None
        for diff, k in ((expr.left, expr.right), (expr.right, expr.left)):
            if (
                isinstance(diff, cst.BinaryOperation)
                and isinstance(diff.operator, cst.Subtract)
                and self._same(diff.left, target)
            ):
                return self._make(
                    call, target, diff.right, Coefficient(k, True), Coefficient(k), "sub"
                )
        return None

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
        return self._make(call, shadow, source, None, Coefficient(alpha), "foreach")

    # Assignments --------------------------------------------------------------------------------
    def _from_assign(self, node: cst.Assign) -> InPlaceUpdate | None:
        if len(node.targets) != 1 or not isinstance(node.value, (cst.BinaryOperation, cst.Call)):
            return None
        target = node.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
            return None
        return self._combination(node, target, node.value, "assign")

    # Result -----------------------------------------------------------------------------------
    def _make(
        self,
        node: cst.CSTNode,
        shadow: cst.BaseExpression,
        source: cst.BaseExpression | None,
        old: Coefficient | None,
        new: Coefficient | None,
        form: str,
    ) -> InPlaceUpdate:
        loop, shadow_container, source_container = self._loop_binding(node, shadow, source)
        return InPlaceUpdate(
            node, shadow, source, old, new, form, loop, shadow_container, source_container
        )

    def _loop_binding(
        self, node: cst.CSTNode, shadow: cst.BaseExpression, source: cst.BaseExpression | None
    ) -> tuple[cst.For | None, cst.BaseExpression | None, cst.BaseExpression | None]:
        """The ``for e, p in zip(X..., Y...)`` binding the two tensors, and X and Y."""
        shadow_name = _root_name(strip_tensor(shadow))
        source_name = _root_name(strip_tensor(source)) if source is not None else None
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
                containers = [container_of(a.value) for a in iterable.args]
                shadow_c = source_c = None
                if shadow_name in positions and positions[shadow_name] < len(containers):
                    shadow_c = containers[positions[shadow_name]]
                if (
                    source_name is not None
                    and source_name in positions
                    and positions[source_name] < len(containers)
                ):
                    source_c = containers[positions[source_name]]
                return ancestor, shadow_c, source_c
            return ancestor, container_of(iterable), None
        if isinstance(shadow, cst.Subscript):
            return None, container_of(shadow.value), None
        return None, None, None


def _root_name(node: cst.BaseExpression | None) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _for_targets(loop: cst.For) -> set[str]:
    found: set[str] = set()

    def walk(node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            found.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                walk(element.value)

    walk(loop.target)
    return found


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
    return None, None


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
        return None
    return None
