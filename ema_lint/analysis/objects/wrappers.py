"""Model wrappers: which expression holds a DDP / DataParallel / FSDP / compiled /
``accelerator.prepare``-d model at a given point, and how to reach the model inside.

Wrapping rebinds the name (``model = DDP(model)``, ``model, opt = accelerator.prepare(model,
opt)``), so the question is flow-sensitive: an EMA copied before the wrapping copies the
bare model, one copied after copies the wrapper. The last assignment to the same name (or
``self.`` attribute) before the point, in the same function, decides; an assignment inside a
branch or loop that does not also hold the point may not have run (``conditional``). An
assignment from a call of a function of the module that returns the model wrapped
(``model = wrap_model(model, args)``) wraps it too, conditionally when some path of that
function returns it bare. A ``self.`` attribute that a method does not bind is followed to
where the class calls that method: a binding before the call, or by a method it calls
before (``self._wrap()`` then ``self._build_ema()``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.params import all_params

_WRAPPERS = {
    "torch.nn.parallel.DistributedDataParallel": "DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel": "DistributedDataParallel",
    "torch.nn.DataParallel": "DataParallel",
    "torch.nn.parallel.DataParallel": "DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel": "DataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel": "FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel": (
        "FullyShardedDataParallel"
    ),
    "torch.compile": "torch.compile",
    "deepspeed.initialize": "deepspeed.initialize",
}
# The attribute that holds the wrapped model, per wrapper (None: no safe way in).
UNWRAP_ATTRIBUTE = {
    "DistributedDataParallel": "module",
    "DataParallel": "module",
    "deepspeed.initialize": "module",
    "torch.compile": "_orig_mod",
    "FullyShardedDataParallel": None,
    "accelerator.prepare": None,  # accelerator.unwrap_model(model)
}
_BRANCHES = (cst.If, cst.For, cst.While, cst.Try, cst.With)


@dataclass(frozen=True, eq=False)
class Wrapping:
    """An expression that holds a wrapped model at some point."""

    wrapper: str  # "DistributedDataParallel", "torch.compile", "accelerator.prepare", ...
    call: cst.Call  # the wrapping call
    assignment: cst.CSTNode | None  # the statement that bound the name (None: inline call)
    conditional: bool  # the wrapping may not have happened on the way to the point
    accelerator: cst.BaseExpression | None = None  # for accelerator.prepare


class ModelWrappers:
    """Wrapping calls of the module, and what an expression holds at a point."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.imports = ctx.get(ImportTable)

    @classmethod
    def build(cls, ctx: FileContext) -> ModelWrappers:
        return cls(ctx)

    def wrapper_call(self, call: cst.CSTNode) -> tuple[str, cst.BaseExpression | None] | None:
        """(wrapper name, accelerator) if ``call`` wraps a model."""
        if not isinstance(call, cst.Call):
            return None
        for name in self.imports.qualified_names(call.func):
            if name in _WRAPPERS:
                return _WRAPPERS[name], None
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "prepare":
            receiver = dotted_name(func.value) or ""
            if "accelerator" in receiver.rsplit(".", 1)[-1].lower():
                return "accelerator.prepare", func.value
        return None

    def unwrapped_in_sibling(self, expr: cst.BaseExpression, at: cst.CSTNode) -> cst.CSTNode | None:
        """Where another method of the class around ``at`` unwraps its parameter of the same
        name as ``expr`` (``unwrap_model(model)``, ``de_parallel(model)``, ``model.module if
        is_parallel(model) else model``, ``getattr(model, "module", model)``): the class
        expects that argument wrapped, so ``expr`` used bare at ``at`` may be the wrapper."""
        if not isinstance(expr, cst.Name):
            return None
        method = self.index.enclosing(at, cst.FunctionDef)
        if method is None or expr.value not in _parameters(method):
            return None
        owner = self.index.enclosing(method, cst.ClassDef, cst.FunctionDef)
        if not isinstance(owner, cst.ClassDef):
            return None
        for other in owner.body.body:
            if other is method or not isinstance(other, cst.FunctionDef):
                continue
            if expr.value not in _parameters(other):
                continue
            for node in self.index.descendants(other, (cst.Call, cst.IfExp)):
                if _unwraps(node, expr.value, self._unwrapping_helpers):  # type: ignore[arg-type]
                    return node
        return None

    @cached_property
    def _unwrapping_helpers(self) -> frozenset[str]:
        """Module-level functions that return their first parameter unwrapped
        (``return model.module if is_parallel(model) else model``)."""
        found = set()
        for function in self.ctx.module.body:
            if not isinstance(function, cst.FunctionDef):
                continue
            params = function.params.posonly_params or function.params.params
            if not params:
                continue
            first = params[0].name.value
            for ret in self.index.descendants(function, cst.Return):
                value = ret.value  # type: ignore[attr-defined]
                if isinstance(value, (cst.Call, cst.IfExp)) and _unwraps(value, first, frozenset()):
                    found.add(function.name.value)
                    break
        return frozenset(found)

    def wrapped_at(
        self, expr: cst.BaseExpression, at: cst.CSTNode, depth: int = 0
    ) -> Wrapping | None:
        """The wrapping ``expr`` holds when ``at`` runs, if it holds a wrapped model (also
        one a function of the module returns)."""
        found = self.wrapper_call(expr)
        if found is not None:
            assert isinstance(expr, cst.Call)
            return Wrapping(found[0], expr, None, False, found[1])
        code = dotted_name(expr)
        if code is None or not isinstance(expr, (cst.Name, cst.Attribute)):
            return None
        scope = self.index.enclosing(at, cst.FunctionDef)
        last: tuple[cst.CSTNode, cst.BaseExpression | None] | None = None
        for assign in self._assignments_binding(scope, code):
            if not self.index.is_before(assign, at) or self.index.contains(assign, at):
                continue
            value = self._value_for(assign, code)  # type: ignore[arg-type]
            if value is not _MISSING:
                last = (assign, value)  # type: ignore[assignment]
        if last is None:
            if code.startswith("self.") and isinstance(scope, cst.FunctionDef):
                bound, wrapping = self._wrapped_by_method_before(code, at)
                if bound:
                    return wrapping
                return self._wrapped_before_method(expr, code, scope, depth)
            return None
        assign, value = last
        if value is None:
            return None
        conditional = any(
            isinstance(a, _BRANCHES)
            and not self.index.contains(a, at)
            and not isinstance(a, cst.With)
            for a in self._ancestors_within(assign, scope)
        )
        found = self.wrapper_call(value)
        if found is None:
            inner = self._returned_wrapping(value, depth)
            if inner is None:
                return None
            return Wrapping(
                inner.wrapper, inner.call, assign, conditional or inner.conditional, None
            )
        assert isinstance(value, cst.Call)
        return Wrapping(found[0], value, assign, conditional, found[1])

    def _wrapped_before_method(
        self, expr: cst.BaseExpression, code: str, fn: cst.FunctionDef, depth: int
    ) -> Wrapping | None:
        """``self.model`` not bound in the method ``fn``: what it holds where the class
        calls ``fn`` (``self._build_ema()`` after ``self._wrap_model()`` in ``__init__``):
        the last binding before that call, made there or by a method called before it.
        Every call of ``fn`` must see the same wrapper."""
        if depth >= 2:
            return None
        from ema_lint.analysis.syntax.values import ValueResolver

        resolver = self.ctx.get(ValueResolver)
        callers = resolver.callers(fn)
        if not callers or fn.name.value == "__init__":
            return None
        found: list[Wrapping | None] = []
        for call in callers:
            direct = self.wrapped_at(expr, call, depth + 1)
            if direct is not None:
                found.append(direct)
                continue
            found.append(self._wrapped_by_method_before(code, call)[1])
        wrapped = [w for w in found if w is not None]
        if len(wrapped) != len(found) or len({w.wrapper for w in wrapped}) != 1:
            return None
        return wrapped[-1]

    def _wrapped_by_method_before(
        self, code: str, call: cst.CSTNode
    ) -> tuple[bool, Wrapping | None]:
        """The last ``self.g()`` before ``call``, in its function, whose method ``g`` binds
        ``code``: (whether there is one, the wrapping it leaves, if any)."""
        scope = self.index.enclosing(call, cst.FunctionDef)
        cls = self.index.enclosing(call, cst.ClassDef)
        if scope is None or cls is None:
            return False, None
        methods = {f.name.value: f for f in cls.body.body if isinstance(f, cst.FunctionDef)}
        direct = [
            a
            for a in self._assignments_binding(scope, code)
            if self.index.is_before(a, call) and self._value_for(a, code) is not _MISSING
        ]
        last: Wrapping | None = None
        bound = False
        for other in self.index.descendants(scope, cst.Call):
            if not self.index.is_before(other, call) or other is call:
                continue
            if direct and self.index.is_before(other, direct[-1]):
                continue  # bound again afterwards, in the caller itself
            func = other.func  # type: ignore[attr-defined]
            if not (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == "self"
                and func.attr.value in methods
            ):
                continue
            method = methods[func.attr.value]
            if not self._assignments_binding(method, code):
                continue
            bound = True
            last = self._bound_at_end(code, method)  # a later binding decides
        return bound, last

    def _bound_at_end(self, code: str, method: cst.FunctionDef) -> Wrapping | None:
        """What ``code`` holds when ``method`` returns, from its own last binding."""
        bindings = self._assignments_binding(method, code)
        value = self._value_for(bindings[-1], code)
        if value is _MISSING or value is None:
            return None
        assign = bindings[-1]
        conditional = any(
            isinstance(a, _BRANCHES) and not isinstance(a, cst.With)
            for a in self._ancestors_within(assign, method)
        )
        found = self.wrapper_call(value)
        if found is None:
            return None
        return Wrapping(found[0], value, assign, conditional, found[1])  # type: ignore[arg-type]

    def _returned_wrapping(self, value: cst.BaseExpression, depth: int) -> Wrapping | None:
        """``model = setup_ddp(model, args)``: a function of the module that returns the
        model wrapped (``return DDP(model)``, or ``model = DDP(model)`` under ``if
        args.distributed:`` then ``return model``). The wrapping is conditional unless every
        ``return`` of the function gives a wrapped model unconditionally."""
        if depth >= 2 or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
            return None
        name = value.func.value
        functions = [
            f
            for f in self.ctx.nodes(cst.FunctionDef)
            if f.name.value == name
            and self.index.enclosing(f, cst.ClassDef, cst.FunctionDef) is None
        ]
        if len(functions) != 1:
            return None
        fn = functions[0]
        returns = [
            r
            for r in self.index.descendants(fn, cst.Return)
            if self.index.enclosing(r, cst.FunctionDef) is fn
        ]
        if not returns or any(r.value is None for r in returns):  # type: ignore[attr-defined]
            return None
        found: list[Wrapping | None] = [
            self.wrapped_at(r.value, r, depth + 1)  # type: ignore[attr-defined]
            for r in returns
        ]
        wrapped = [w for w in found if w is not None]
        if not wrapped or len({w.wrapper for w in wrapped}) != 1:
            return None
        if any(w.wrapper == "accelerator.prepare" for w in wrapped):
            return None  # the accelerator is the function's; unwrap_model is not reachable
        conditional = len(wrapped) < len(found) or any(w.conditional for w in wrapped)
        first = wrapped[0]
        return Wrapping(first.wrapper, first.call, first.assignment, conditional)

    def _assignments(self) -> dict[int, list[cst.Assign]]:
        """Assignments by the id of their function (``id(None)`` at module level)."""
        found = getattr(self, "_by_scope", None)
        if found is None:
            found = self._by_scope = {}
            for assign in self.ctx.nodes(cst.Assign):
                scope = self.index.enclosing(assign, cst.FunctionDef)
                found.setdefault(id(scope), []).append(assign)
        return found

    def _assignments_binding(self, scope: cst.CSTNode | None, code: str) -> list[cst.Assign]:
        """The assignments of ``scope`` with a target (or a tuple element) spelled ``code``:
        the only ones ``_value_for`` finds a value in, grouped once per scope."""
        tables = getattr(self, "_binding", None)
        if tables is None:
            tables = self._binding = {}
        table = tables.get(id(scope))
        if table is None:
            table = tables[id(scope)] = {}
            for assign in self._assignments().get(id(scope), []):
                spelled: list[str | None] = []
                for target in assign.targets:
                    node = target.target
                    spelled.append(dotted_name(node))
                    if isinstance(node, (cst.Tuple, cst.List)):
                        spelled.extend(dotted_name(e.value) for e in node.elements)
                for name in dict.fromkeys(spelled):
                    if name is not None:
                        table.setdefault(name, []).append(assign)
        return table.get(code, [])

    def _ancestors_within(self, node: cst.CSTNode, scope: cst.CSTNode | None):
        for ancestor in self.index.ancestors(node):
            if ancestor is scope:
                return
            yield ancestor

    def _value_for(self, assign: cst.Assign, code: str):
        """What ``assign`` binds to ``code``: the value, the matching argument of an
        ``accelerator.prepare(...)`` or the model of ``deepspeed.initialize`` for a tuple
        target, None for an unknown element; _MISSING when it does not bind ``code``."""
        for target in assign.targets:
            node = target.target
            if dotted_name(node) == code:
                return assign.value
            if isinstance(node, (cst.Tuple, cst.List)):
                for position, element in enumerate(node.elements):
                    if dotted_name(element.value) != code:
                        continue
                    value = assign.value
                    wrapper = self.wrapper_call(value)
                    if wrapper is None:
                        return None
                    if wrapper[0] == "deepspeed.initialize":
                        return value if position == 0 else None
                    if wrapper[0] == "accelerator.prepare":
                        assert isinstance(value, cst.Call)
                        args = [a for a in value.args if a.keyword is None and not a.star]
                        if position < len(args) and not any(a.star for a in value.args):
                            return value
                    return None
        return _MISSING


_MISSING = object()


def _parameters(function: cst.FunctionDef) -> set[str]:
    return {p.name.value for p in all_params(function)}


def _unwraps(node: cst.Call | cst.IfExp, name: str, helpers: frozenset[str]) -> bool:
    """``node`` yields the model inside a wrapper held by ``name``."""

    def is_name(expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Name) and expr.value == name

    if isinstance(node, cst.IfExp):
        inner = node.body
        return (
            isinstance(inner, cst.Attribute)
            and inner.attr.value in ("module", "_orig_mod")
            and is_name(inner.value)
            and is_name(node.orelse)
        )
    if not node.args or not is_name(node.args[0].value):
        return False
    called = (dotted_name(node.func) or "").rsplit(".", 1)[-1]
    if called == "getattr":
        return len(node.args) == 3 and is_name(node.args[2].value)
    return (
        "unwrap" in called.lower()
        or called in ("de_parallel", "get_raw_model")
        or (isinstance(node.func, cst.Name) and called in helpers)
    )
