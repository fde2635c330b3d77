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

import libcst as cst

from ema_lint.analysis.objects.apis import (
    API_TABLE,
    ApiSpec,
    ApiTable,
    BoundCall,
    Role,
    bind_arguments,
)
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable
from ema_lint.analysis.syntax.values import Symbol, ValueResolver

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
        for call in ctx.nodes(cst.Call):
            qualname = imports.resolve(call.func, known)
            if qualname is None:
                continue
            bound = bind_arguments(known[qualname], call, qualname)
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
