"""Which calls of the module are uses of a known averaging API, with arguments bound.

Three providers, all built from the index's list of calls and mappings (no extra walk):

- ``ApiCalls``: real calls (``ModelEmaV2(model, decay=0.99)``), resolved through imports;
- ``MappingCalls``: *virtual* calls, mappings that stand for a constructor call: mmengine /
  mmdet config dicts (``dict(type='EMAHook', ema_type='ExpMomentumEMA', momentum=0.0002)``,
  ``type=EMAHook`` in pure-Python configs), Hydra ``_target_`` dicts and LightningCLI
  ``class_path`` / ``init_args`` dicts;
- ``BoundCalls``: both, in document order. Value rules iterate this one, so a config file
  is judged exactly like the constructor call it stands for.

Hooks that build another averaging class (mmengine ``EMAHook(ema_type=..., **kwargs)``)
get ``BoundCall.target``: the spec of the class they build, whose parameters the kwargs are.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from ema_lint.analysis.objects.apis import (
    API_TABLE,
    ApiSpec,
    ApiTable,
    BoundCall,
    Role,
    bind_arguments,
)
from ema_lint.analysis.objects.updates import InPlaceUpdates
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable
from ema_lint.analysis.syntax.values import Symbol, ValueResolver
from ema_lint.analysis.syntax.vocabulary import NOT_WEIGHT_TOKENS, tokens

_TYPE_KEYS = ("type", "_target_", "class_path")
# String-dispatched constructors (NVlabs ``dnnlib``): ``construct_class_by_name(class_name=
# 'training.phema.PowerFunctionEMA', net=net)`` and the ``EasyDict(class_name=..., ...)``
# that holds such a call's keywords.
_CONSTRUCTORS = ("construct_class_by_name", "EasyDict")
_CLASS_NAME_KEYS = (*_TYPE_KEYS, "class_name")


def _constructor_by_name(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
    return name in _CONSTRUCTORS and any(
        a.keyword is not None and a.keyword.value == "class_name" for a in call.args
    )


def _attach_target(bound: BoundCall, resolver: ValueResolver, table: ApiTable) -> None:
    """For a forwarding hook, the spec its kwargs configure (``ema_type``)."""
    forwards = bound.spec.forwards_to
    if forwards is None:
        return
    param, default = forwards
    name: str | None = default
    expr = bound.value(param)
    if expr is not None:
        value = resolver.resolve(expr)
        if value is None:
            bound.target = None
            return
        if isinstance(value.value, str):
            name = value.value
        elif isinstance(value.value, Symbol):
            spec = table.get(value.value.qualname)
            bound.target = spec
            return
        else:
            return
    elif bound.has_star:
        return
    bound.target = table.registered(name) if name else None
    if bound.target is not None:
        bound.unknown_keywords = [
            k
            for k in bound.args
            if k not in bound.spec.params and not bound.target.accepts(k) and k != "priority"
        ]


def dispatch_table(ctx: FileContext, imports: ImportTable) -> dict[str, cst.Call]:
    """Names bound once to ``getattr(module, name)`` of an imported module: ``ema_fn =
    getattr(utils, config.get("which_ema", "tf1_ema"))`` picks a function by its name."""
    found: dict[str, cst.Call] = {}
    if not any(
        isinstance(c.func, cst.Name) and c.func.value == "getattr" for c in ctx.nodes(cst.Call)
    ):
        return found  # the common case: one pass over the calls, none over the assignments
    seen: set[str] = set()
    for node in ctx.nodes(cst.Assign):
        value = node.value
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            continue
        name = node.targets[0].target.value
        if name in seen:
            found.pop(name, None)  # bound more than once: which one a call sees is unknown
            continue
        seen.add(name)
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Name)
            and value.func.value == "getattr"
            and len(value.args) in (2, 3)
            and imports.qualified_names(value.args[0].value)
        ):
            found[name] = value
    return found


def _dispatched(
    call: cst.Call, imports: ImportTable, resolver: ValueResolver, project: Any
) -> str | None:
    """The project function ``getattr(module, name)`` returns, when its name is known: a
    string value, or the default of a ``config.get(key, "name")`` the config leaves unknown."""
    for qualname in dispatch_candidates(call, imports, resolver):
        if project.spec_for(qualname) is not None:
            return qualname
    return None


def dispatch_candidates(call: cst.Call, imports: ImportTable, resolver: ValueResolver) -> list[str]:
    """The qualified names ``getattr(module, name)`` may return, when the name is known (a
    summary, which reads no other module, records them for the importer to judge)."""
    expr = call.args[1].value
    value = resolver.resolve(expr)
    name = value.value if value is not None else None
    if (
        name is None
        and isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value == "get"
        and len(expr.args) == 2
    ):
        default = resolver.resolve(expr.args[1].value)
        name = default.value if default is not None else None
    if not isinstance(name, str) or not name.isidentifier():
        return []
    return [f"{module}.{name}" for module in imports.qualified_names(call.args[0].value)]


class ApiCalls:
    """Every call of the module that resolves to an entry of the API table."""

    def __init__(self, table: ApiTable) -> None:
        self.table = table
        self._by_call: dict[int, BoundCall] = {}
        self.calls: list[BoundCall] = []

    @classmethod
    def build(cls, ctx: FileContext) -> ApiCalls:
        result = cls(API_TABLE)
        imports = ctx.get(ImportTable)
        known = API_TABLE.by_name
        project = ctx.project
        if project is not None:
            # The project's own averaging classes and update functions, as specs.
            extra = project.apis()
            if extra:
                known = {**known, **extra}
        resolver: ValueResolver | None = None
        dispatch = dispatch_table(ctx, imports) if project is not None else {}
        for call in ctx.nodes(cst.Call):
            qualname = imports.resolve(call.func, known)
            if qualname is None and isinstance(call.func, cst.Name) and call.func.value in dispatch:
                resolver = resolver or ctx.get(ValueResolver)
                qualname = _dispatched(dispatch[call.func.value], imports, resolver, project)
                if qualname is not None and qualname not in known:
                    known = {**known, qualname: project.spec_for(qualname)}
            if qualname is None:
                continue
            spec = known[qualname]
            if spec.elementwise and not ctx.get(InPlaceUpdates).applied_to_weights(call):
                continue  # a leaf-wise average of something else (a loss, a metric)
            bound = bind_arguments(spec, call, qualname)
            if bound.spec.forwards_to is not None:
                resolver = resolver or ctx.get(ValueResolver)
                _attach_target(bound, resolver, API_TABLE)
            result._by_call[id(call)] = bound
            result.calls.append(bound)
        return result

    def bound(self, call: cst.CSTNode) -> BoundCall | None:
        return self._by_call.get(id(call))

    def with_role(self, *roles: Role) -> list[BoundCall]:
        return [b for b in self.calls if b.spec.role in roles]


class MappingCalls:
    """Config mappings that stand for a call of a known API (virtual calls)."""

    def __init__(self) -> None:
        self.calls: list[BoundCall] = []
        self._by_node: dict[int, BoundCall] = {}

    @classmethod
    def build(cls, ctx: FileContext) -> MappingCalls:
        result = cls()
        resolver = ctx.get(ValueResolver)
        for node in ctx.nodes(cst.Dict):
            result._add(_bind_dict(node, resolver))
        for node in ctx.nodes(cst.Call):
            if isinstance(node.func, cst.Name) and node.func.value == "dict":
                result._add(_bind_dict_call(node, resolver))
            elif _constructor_by_name(node):
                result._add(_bind_dict_call(node, resolver, _CLASS_NAME_KEYS))
        result.calls.sort(key=lambda b: ctx.index.order[id(b.call)])
        return result

    def _add(self, bound: BoundCall | None) -> None:
        if bound is not None:
            self.calls.append(bound)
            self._by_node[id(bound.call)] = bound

    def bound(self, node: cst.CSTNode) -> BoundCall | None:
        return self._by_node.get(id(node))


def _spec_for_type(expr: cst.BaseExpression, key: str, resolver: ValueResolver) -> ApiSpec | None:
    value = resolver.resolve(expr)
    if value is None:
        return None
    if isinstance(value.value, Symbol):
        return API_TABLE.get(value.value.qualname)
    if isinstance(value.value, str):
        if key == "type":
            return API_TABLE.registered(value.value) or API_TABLE.get(value.value)
        return API_TABLE.get(value.value)
    return None


def _finish(
    spec: ApiSpec,
    node: cst.CSTNode,
    items: list[tuple[str, cst.Arg | cst.DictElement]],
    star: bool,
    resolver: ValueResolver,
) -> BoundCall:
    bound = BoundCall(spec, node, spec.qualname, virtual=True, has_star=star)
    for key, item in items:
        bound.args[key] = item
        if not spec.accepts(key):
            bound.unknown_keywords.append(key)
    if spec.forwards_to is not None:
        _attach_target(bound, resolver, API_TABLE)
    return bound


def _bind_dict(node: cst.Dict, resolver: ValueResolver) -> BoundCall | None:
    items: list[tuple[str, cst.DictElement]] = []
    spec: ApiSpec | None = None
    init_args: cst.BaseExpression | None = None
    star = False
    for element in node.elements:
        if not isinstance(element, cst.DictElement):
            star = True
            continue
        key = resolver.resolve(element.key) if isinstance(element.key, cst.SimpleString) else None
        if key is None or not isinstance(key.value, str):
            continue
        if key.value in _TYPE_KEYS:
            spec = _spec_for_type(element.value, key.value, resolver)
            if spec is None:
                return None
            continue
        if key.value == "init_args":
            init_args = element.value
            continue
        items.append((key.value, element))
    if spec is None:
        return None
    if init_args is not None:
        inner = resolver.mapping(init_args)
        if inner is None:
            return _finish(spec, node, [], True, resolver)
        return _mapping_args(spec, node, inner, resolver)
    return _finish(spec, node, items, star, resolver)  # type: ignore[arg-type]


def _bind_dict_call(
    node: cst.Call, resolver: ValueResolver, type_keys: tuple[str, ...] = _TYPE_KEYS
) -> BoundCall | None:
    items: list[tuple[str, cst.Arg]] = []
    spec: ApiSpec | None = None
    star = False
    init_args: cst.BaseExpression | None = None
    for arg in node.args:
        if arg.star or arg.keyword is None:
            star = True
            continue
        key = arg.keyword.value
        if key in type_keys:
            spec = _spec_for_type(arg.value, key, resolver)
            if spec is None:
                return None
            continue
        if key == "init_args":
            init_args = arg.value
            continue
        items.append((key, arg))
    if spec is None:
        return None
    if init_args is not None:
        inner = resolver.mapping(init_args)
        if inner is None:
            return _finish(spec, node, [], True, resolver)
        return _mapping_args(spec, node, inner, resolver)
    return _finish(spec, node, items, star, resolver)  # type: ignore[arg-type]


def _mapping_args(
    spec: ApiSpec, node: cst.CSTNode, inner: cst.Dict | cst.Call, resolver: ValueResolver
) -> BoundCall:
    """LightningCLI ``init_args``: the arguments are the inner mapping's items."""
    items: list[tuple[str, cst.Arg | cst.DictElement]] = []
    star = False
    if isinstance(inner, cst.Dict):
        for element in inner.elements:
            if not isinstance(element, cst.DictElement):
                star = True
                continue
            key = resolver.resolve(element.key)
            if key is not None and isinstance(key.value, str):
                items.append((key.value, element))
    else:
        for arg in inner.args:
            if arg.keyword is None or arg.star:
                star = True
            else:
                items.append((arg.keyword.value, arg))
    return _finish(spec, node, items, star, resolver)


class BoundCalls:
    """Real and virtual calls of averaging APIs, in document order: what value rules judge."""

    def __init__(self, calls: list[BoundCall]) -> None:
        self.calls = calls
        self._by_node = {id(b.call): b for b in calls}

    @classmethod
    def build(cls, ctx: FileContext) -> BoundCalls:
        real = ctx.get(ApiCalls).calls
        virtual = ctx.get(MappingCalls).calls if _may_hold_mappings(ctx) else []
        calls = sorted([*real, *virtual], key=lambda b: ctx.index.order[id(b.call)])
        return cls(calls)

    def bound(self, node: cst.CSTNode) -> BoundCall | None:
        return self._by_node.get(id(node))


def _may_hold_mappings(ctx: FileContext) -> bool:
    """Cheap check before looking at every dict: some string names a registered type."""
    return bool(ctx.nodes(cst.Dict)) or any(
        (isinstance(c.func, cst.Name) and c.func.value == "dict") or _constructor_by_name(c)
        for c in ctx.nodes(cst.Call)
    )


def swapped_trees(ctx: FileContext, bound: BoundCall) -> tuple[cst.Arg, cst.Arg, str] | None:
    """``ema = optax.incremental_update(ema, params, w)``: a functional update whose result
    is bound to the tree passed as the *new* tensors, so the average is weighted by the
    weight the API gives the new value (the decay passed as ``step_size`` is then right).
    The argument passed as the new tensors, the one passed as the old, and the name the
    result is bound to; None for the API's own order or anything else."""
    spec = bound.spec
    if spec.role is not Role.EMA_FUNCTION or spec.source is None or spec.shadow is None:
        return None
    if bound.virtual:
        return None
    statement = ctx.index.parent(bound.call)
    if not (
        isinstance(statement, cst.Assign)
        and statement.value is bound.call
        and len(statement.targets) == 1
    ):
        return None
    source_arg, shadow_arg = bound.arg(spec.source), bound.arg(spec.shadow)
    if not isinstance(source_arg, cst.Arg) or not isinstance(shadow_arg, cst.Arg):
        return None
    target = ctx.code(statement.targets[0].target).strip()
    new, old = ctx.code(source_arg.value).strip(), ctx.code(shadow_arg.value).strip()
    if new != target or old == target:
        return None
    if any(w in NOT_WEIGHT_TOKENS for name in (new, old) for w in tokens(name)):
        return None
    return source_arg, shadow_arg, target
