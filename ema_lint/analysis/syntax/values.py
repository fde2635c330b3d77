"""Static values of expressions, followed to where they are written.

A decay in a real script is rarely a literal at the call: it sits in a constant, an argparse
default, a dataclass field, a config dict or a local variable. The resolver follows an
expression to a number (or string, bool, or a qualified name such as ``torch.float16``) and
remembers where it came from (``via``, for messages: "--ema-decay default", "EMA_DECAY") and
the literal that spells it (``origin``, for fixes). Anything it cannot follow is *unknown*,
and no value rule fires on an unknown.

Paths followed:

- literals, unary minus, arithmetic and ``**`` on resolvable values, ``min``/``max``/``abs``/
  ``float``/``int`` of them, ``math.exp``/``math.log``/``math.sqrt``;
- names: a binding is followed only when the name has exactly one binding in its scope
  (function, class body or module; ``global`` declarations honoured), flow-insensitively;
- function parameters: the value every in-module caller passes (``f(x, 0.99)``,
  ``self.f(...)``, ``Class(...)`` for ``__init__``) when they all agree, else the default
  when no caller passes it;
- ``args.x`` where ``x`` is the destination of an ``add_argument`` of the module (dashes to
  underscores, ``dest=``, ``set_defaults``, string defaults converted by ``type=``), the
  parser being built anywhere in the module;
- ``cfg.x`` where ``cfg`` is an instance of a dataclass / attrs / pydantic / NamedTuple /
  flax struct / equinox class of the module (constructed in the module, or a parameter
  annotated with it): the constructor argument, else the field default; nested
  ``cfg.ema.decay`` through ``default_factory``; ``self.x`` in a method of such a class,
  as a parameter of its generated ``__init__``: what every construction passes (``Cls(...)``,
  flax ``Cls.create(...)``), else the default;
- ``Class.NAME`` and ``self.NAME`` class constants, ``self.x`` assigned once in the class;
- dict literals and ``dict(...)``: ``config["k"]``, ``config.get("k", default)``, nested.

The resolver is built from the module index (the node lists by type), never another walk.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Union

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.params import all_params

if TYPE_CHECKING:
    from ema_lint.analysis.syntax.index import ModuleIndex


@dataclass(frozen=True)
class Symbol:
    """A value that is a named object, e.g. ``torch.float16``."""

    qualname: str

    def __str__(self) -> str:
        return self.qualname


Scalar = Union[int, float, str, bool, None, Symbol]  # noqa: UP007


@dataclass(frozen=True, eq=False)
class Value:
    """A resolved value and where it came from."""

    value: Scalar
    # The literal that spells the value when it is exactly one literal (for fixes), else None.
    origin: cst.BaseExpression | None
    # How the value was reached, for messages ("EMA_DECAY", "--ema-decay default"); "" if direct.
    via: str = ""
    # True when a name on the way is also used elsewhere: editing ``origin`` changes more
    # than the expression that was resolved.
    shared: bool = False
    # "half-life" when the number is computed from a half-life or time constant
    # (``0.5 ** (1 / halflife)``, ``math.exp(-1 / tau)``): a deliberately chosen horizon;
    # "half-life-samples" when that half-life is counted in samples (``0.5 ** (batch /
    # halflife_nimg)``): the batch-aware form the StyleGAN and EDM recipes use;
    # "schedule-start" when it is where a rising schedule starts (its lowest value).
    form: str = ""
    # For a value computed from one literal and numbers written in the expression itself
    # (``1 - x`` with ``x = 0.01``, ``1.0 - DECAY``): that literal, the one to change.
    # ``origin`` stays None (editing it does not set the value to a number).
    source: cst.BaseExpression | None = None

    @property
    def written(self) -> cst.BaseExpression | None:
        """The literal the value is written in: its ``origin``, else its ``source``."""
        return self.origin if self.origin is not None else self.source

    @property
    def number(self) -> float | None:
        """The value as a finite float, else None (a string, or a number no float holds)."""
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        try:
            number = float(v)
        except OverflowError:
            return None
        return number if math.isfinite(number) else None


_BINARY: dict[type, Callable[[float, float], float]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.Divide: operator.truediv,
    cst.FloorDivide: operator.floordiv,
    cst.Modulo: operator.mod,
    cst.Power: operator.pow,
}

# Folding is bounded: an integer operand or result wider than this is unknown (it is no
# training setting, and ``10**10**10`` would take forever), and so is a non-finite float.
MAX_INT_BITS = 4096

_MATH_FUNCTIONS: dict[str, Callable[..., float]] = {
    "math.exp": math.exp,
    "math.log": math.log,
    "math.sqrt": math.sqrt,
    "math.log2": math.log2,
    "math.log10": math.log10,
    "numpy.exp": math.exp,
    "numpy.log": math.log,
    "numpy.sqrt": math.sqrt,
}
_MATH_CONSTANTS = {"math.pi": math.pi, "math.e": math.e, "numpy.pi": math.pi, "numpy.e": math.e}
_BUILTINS: dict[str, Callable[..., object]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "float": float,
    "int": int,
    "round": round,
}
_DATACLASS_DECORATORS = {
    "dataclass",
    "dataclasses.dataclass",
    "attr.s",
    "attr.attrs",
    "attr.define",
    "attr.frozen",
    "attr.mutable",
    "attrs.define",
    "attrs.frozen",
    "attrs.mutable",
    "define",
    "frozen",
    "mutable",
    "pydantic.dataclasses.dataclass",
    "flax.struct.dataclass",
    "struct.dataclass",
    "chex.dataclass",
}
_DATACLASS_BASES = {"BaseModel", "BaseSettings", "NamedTuple", "PretrainedConfig"}
# Bases whose last name is too common to trust alone (``eqx.Module`` is no ``nn.Module``):
# recognised only through the imports.
_DATACLASS_QUALIFIED_BASES = {
    "equinox.Module",
    "flax.struct.PyTreeNode",
    "flax.training.train_state.TrainState",
}
# Class methods of a dataclass-like base that construct an instance from keywords
# (flax ``TrainState.create(apply_fn=..., params=..., tx=..., **fields)``).
_KEYWORD_CONSTRUCTORS = {"flax.training.train_state.TrainState": "create"}
_FIELD_FUNCTIONS = {"field", "ib", "attrib", "Field"}
# Methods that return their receiver (``EMA(model).to(device)`` is still an ``EMA``).
# How many of the module's classes a class's bases are followed through.
_MAX_BASES = 8
_SAME_OBJECT = {"to", "cuda", "cpu", "eval", "train", "float", "half", "requires_grad_"}
# Methods a call of the instance itself runs (``nn.Module.__call__`` runs ``forward``).
_CALL_METHODS = ("forward", "__call__")


def literal_number(node: cst.BaseExpression) -> int | float | None:
    """The number spelled by an Integer/Float literal (with an optional unary minus)."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = literal_number(node.expression)
        return None if inner is None else -inner
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            number = node.evaluated_value
        except (ValueError, SyntaxError):
            return None
        return number if _bounded(number) else None
    return None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_time_constant(value: object) -> bool:
    """A number above one where a decay or rate is expected: a count of steps (a warmup
    ramp's time constant, an ``update_every``), never a weight, so it is not judged as one."""
    return _is_number(value) and value > 1  # type: ignore[operator]


def _bounded(value: object) -> bool:
    """False for the numbers folding treats as unknown: ``inf``, ``nan``, huge integers."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return value.bit_length() <= MAX_INT_BITS
    return True


def _fold(op: Callable[[float, float], float], left: float, right: float) -> object:
    """``op(left, right)``, or None when its result would exceed the bounds (unknown)."""
    if not (_bounded(left) and _bounded(right)):
        return None
    if isinstance(left, int) and isinstance(right, int):
        bits = max(abs(left).bit_length(), 1)
        if op is operator.pow and right > 0 and abs(left) > 1 and bits * right > MAX_INT_BITS:
            return None
        if op is operator.mul and bits + abs(right).bit_length() > MAX_INT_BITS + 1:
            return None
    result = op(left, right)
    return result if _bounded(result) else None


def _string(node: cst.CSTNode | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except (ValueError, SyntaxError):
            return None
        return value if isinstance(value, str) else None
    return None


Scope = Union[cst.FunctionDef, cst.ClassDef, cst.Lambda, None]  # noqa: UP007
_SCOPE_TYPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


@dataclass(frozen=True, eq=False)
class Binding:
    """One binding of a name in a scope: an assigned expression, a parameter, or other."""

    kind: str  # "assign", "param", "other"
    value: cst.BaseExpression | None = None
    param: cst.Param | None = None
    function: cst.FunctionDef | cst.Lambda | None = None
    # For a loop variable ("other"): the sequence whose elements it takes
    # (``for rate, params in zip(self.ema_rate, self.ema_params)``: ``self.ema_rate``).
    element: cst.BaseExpression | None = None
    # For a loop variable: the loop, and the variable's position in a tuple target
    # (``for net, suffix in ema.get()``: 0 for ``net``; None for a plain name).
    loop: cst.For | None = None
    slot: int | None = None


@dataclass(frozen=True, eq=False)
class ArgparseOption:
    """One ``add_argument`` call: its destination, default and ``type=``."""

    call: cst.Call
    dest: str
    flag: str  # the option as written, for messages ("--ema-decay")
    default: cst.BaseExpression | None
    implicit_default: Scalar = None
    type_name: str | None = None


@dataclass(frozen=True, eq=False)
class _Instance:
    """An instance of a dataclass-like class of the module (call None: unknown arguments)."""

    cls: cst.ClassDef
    call: cst.Call | None


@dataclass(frozen=True, eq=False)
class _Mapping:
    node: cst.Dict | cst.Call
    name: str | None  # the name the mapping is bound to, for mutation checks


_Object = Union[_Instance, _Mapping]  # noqa: UP007


class ValueResolver:
    """Constant folding over the module's bindings, with provenance."""

    # Give up on chains longer than this (a = b, b = c, ...), and on cycles.
    MAX_DEPTH = 24
    MAX_REBINDINGS = 16  # assignments of one name followed to the one reaching its use

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.imports = ctx.get(ImportTable)
        self._scopes: dict[int, dict[str, list[Binding]]] | None = None
        self._globals: dict[int, set[str]] = {}
        self._argparse: dict[str, list[ArgparseOption]] | None = None
        self._config_entries: dict[str, list[cst.BaseExpression]] | None = None
        self._set_defaults: dict[str, cst.BaseExpression] = {}
        self._calls_by_name: dict[str, list[cst.Call]] | None = None
        self._callers_of: dict[int, list[cst.Call]] = {}  # asked per use of each parameter
        self._name_callers: dict[str, list[cst.Call]] = {}  # ``f(...)`` calls, by name
        self._shapes: dict[int, tuple[str, ...]] = {}
        self._arguments: dict[
            tuple[tuple[str, ...], str, int], list[tuple[cst.Call, cst.BaseExpression | None]]
        ] = {}
        self._classes: dict[str, list[cst.ClassDef]] | None = None
        self._self_attrs: dict[int, dict[str, list[cst.BaseExpression | None]]] = {}
        self._self_attrs_built = False
        self._lineages: dict[int, list[cst.ClassDef]] = {}
        self._subclass_table: dict[int, list[cst.ClassDef]] | None = None
        self._instance_call_memo: dict[frozenset[str], list[cst.Call]] = {}
        self._name_counts: Counter[str] | None = None
        self._flows: tuple[dict[str, set[str]], dict[str, set[str]]] | None = None
        self._subclasses: dict[str, list[str]] | None = None
        self._attr_counts: Counter[str] | None = None
        self._attr_assigned: dict[str, set[str]] | None = None
        self._subscript_assigned: set[str] | None = None

    @classmethod
    def build(cls, ctx: FileContext) -> ValueResolver:
        return cls(ctx)

    # Public ---------------------------------------------------------------------------------
    def resolve(self, node: cst.BaseExpression) -> Value | None:
        """The static value of ``node``, or None when it is unknown (``inf``, ``nan`` and
        integers no float holds are unknown: no rule has to expect them)."""
        try:
            value = self._resolve(node, 0)
        except RecursionError:
            return None
        return value if value is None or _bounded(value.value) else None

    def number(self, node: cst.BaseExpression) -> float | None:
        value = self.resolve(node)
        return None if value is None else value.number

    def possible(self, node: cst.BaseExpression) -> list[Value]:
        """Every value ``node`` may have: for a name bound several times in its scope (as in
        ``dtype = torch.float32`` then ``if fp16: dtype = torch.float16``), the value of each
        binding that resolves; else the single resolved value (or nothing)."""
        single = self.resolve(node)
        if single is not None:
            return [single]
        if not isinstance(node, cst.Name):
            return []
        found: list[Value] = []
        for binding in self._lookup(node.value, self._scope_of(node)) or []:
            if binding.kind == "assign" and binding.value is not None:
                value = self.resolve(binding.value)
                if value is not None:
                    found.append(Value(value.value, value.origin, value.via or node.value, True))
        return found

    def elements_of(self, node: cst.BaseExpression) -> Value | None:
        """The one value of the elements of what ``node`` holds, for a receiver that takes
        a number, a sequence or a comma-separated string of them (``ema_rate="0.9999"``)."""
        value = self.resolve(node)
        if value is None:
            try:
                return self._elements(node, 0)
            except RecursionError:
                return None
        if value.number is not None:
            return value
        if not isinstance(value.value, str):
            return None
        numbers = _numbers(value.value, ",")
        if numbers is None:
            return None
        origin = value.origin if len(numbers) == 1 else None
        return Value(numbers[0], origin, value.via, value.shared)

    def element_source(self, node: cst.BaseExpression) -> cst.Name | None:
        """The name a loop variable's sequence is built from, where that name is a
        parameter: ``rate`` in ``for rate, p in zip(self.ema_rate, ...)``, with
        ``self.ema_rate = [float(x) for x in ema_rate.split(",")]`` in ``__init__``."""
        if not isinstance(node, cst.Name):
            return None
        binding = self._only_binding(node)
        if binding is None or binding.element is None:
            return None
        found = self._sequence_source(binding.element, 0)
        if found is None:
            return None
        param = self._only_binding(found)
        return found if param is not None and param.kind == "param" else None

    def _sequence_source(self, node: cst.BaseExpression, depth: int) -> cst.Name | None:
        """The one name a sequence expression is made from (``[x]``, ``x.split(",")``
        parsed, either branch of ``[x] if isinstance(x, float) else ...``)."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, (cst.List, cst.Tuple)):
            if len(node.elements) != 1 or isinstance(node.elements[0], cst.StarredElement):
                return None
            value = node.elements[0].value
            return value if isinstance(value, cst.Name) else None
        if isinstance(node, cst.IfExp):
            found = [self._sequence_source(b, depth + 1) for b in (node.body, node.orelse)]
            names = {f.value for f in found if f is not None}
            return next(f for f in found if f is not None) if len(names) == 1 else None
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            split = node.for_in.iter
            if (
                node.for_in.inner_for_in is None
                and not node.for_in.ifs
                and isinstance(split, cst.Call)
                and isinstance(split.func, cst.Attribute)
                and split.func.attr.value == "split"
                and isinstance(split.func.value, cst.Name)
            ):
                return split.func.value
            return None
        if isinstance(node, cst.Name):
            binding = self._only_binding(node)
            if binding is not None and binding.kind == "param":
                return node
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                return self._sequence_source(binding.value, depth + 1)
            return None
        kept = self.kept_on_self(node)
        return self._sequence_source(kept, depth + 1) if kept is not None else None

    def kept_on_self(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The one expression ``self.<attr>`` is assigned in its class, if ``node`` is one."""
        if not (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
        ):
            return None
        cls = self._class_named(node.value, node)
        assigned = self._self_attributes(cls).get(node.attr.value) if cls else None
        return assigned[0] if assigned and len(assigned) == 1 else None

    def scheduled_from(self, node: cst.BaseExpression) -> Value | None:
        """The value a name starts as when its other bindings only schedule it from that
        value: ``m = args.moco_m`` then ``if args.cos: m = adjust_momentum(epoch, args)``,
        where the module's ``adjust_momentum`` reads ``moco_m`` itself. It is the value of
        every run that leaves the schedule off, and where the schedule starts."""
        if not isinstance(node, cst.Name):
            return None
        base: Value | None = None
        key: str | None = None
        schedules: list[str] = []
        for binding in self._lookup(node.value, self._scope_of(node)) or []:
            if binding.kind != "assign" or binding.value is None:
                return None
            value = self.resolve(binding.value)
            if value is not None:
                if base is not None and value.value != base.value:
                    return None
                base = value
                expr = binding.value
                key = expr.attr.value if isinstance(expr, cst.Attribute) else None
                key = expr.value if isinstance(expr, cst.Name) else key
            elif isinstance(binding.value, cst.Call) and isinstance(binding.value.func, cst.Name):
                schedules.append(binding.value.func.value)
            else:
                return None
        if base is None or key is None or not schedules:
            return None
        for name in schedules:
            functions = [
                f
                for f in self.index.functions_named(name)
                if self.index.enclosing(f, cst.ClassDef, cst.FunctionDef) is None
            ]
            if not functions or not all(self._reads(f, key) for f in functions):
                return None
        return base

    def _reads(self, function: cst.FunctionDef, name: str) -> bool:
        """``function`` reads ``name`` (as a name or an attribute)."""
        for node in self.index.descendants(function, cst.Attribute):
            if isinstance(node, cst.Attribute) and node.attr.value == name:
                return True
        return any(
            isinstance(n, cst.Name) and n.value == name
            for n in self.index.descendants(function, cst.Name)
        )

    def qualified(self, node: cst.BaseExpression) -> str | None:
        """The qualified name ``node`` stands for (through imports and single bindings)."""
        value = self.resolve(node)
        if value is not None and isinstance(value.value, Symbol):
            return value.value.qualname
        return None

    def bindings_of(self, name: cst.Name) -> list[Binding] | None:
        """The bindings of a name as seen where it is used (None: not bound in the module)."""
        return self._lookup(name.value, self._scope_of(name))

    def visible(self, name: str, at: cst.CSTNode) -> list[Binding] | None:
        """The bindings ``name`` would have if it were written at ``at`` (None: unbound).

        For fixes that write a name somewhere new: the list is the same object as
        ``bindings_of`` returns for a use of the same binding, so ``is`` compares them."""
        return self._lookup(name, self._scope_of(at))

    def callers(self, function: cst.FunctionDef) -> list[cst.Call]:
        """In-module calls of ``function``: ``f(...)``, ``self.f(...)``, ``Class(...)``."""
        found = self._callers_of.get(id(function))
        if found is None:
            found = self._callers_of[id(function)] = self._callers(function)
        return found

    def arguments_for(
        self, function: cst.FunctionDef, param: cst.Param
    ) -> list[tuple[cst.Call, cst.BaseExpression | None]]:
        """Each in-module caller of ``function`` with what it passes for ``param`` (as
        ``argument_for``). Functions of one name and one signature (copies of a script) have
        the same callers and share the answer, so asking for each copy stays linear."""
        callers = self.callers(function)
        shape = self._shapes.get(id(function))
        if shape is None:
            shape = self._shapes[id(function)] = _positional_names(function)
        key = (shape, param.name.value, id(callers))
        found = self._arguments.get(key)
        if found is None:
            found = [(call, self.argument_for(function, param, call)) for call in callers]
            self._arguments[key] = found
        return found

    def member(self, base: cst.BaseExpression, attr: str) -> Value | None:
        """The value of ``<base>.<attr>`` where this module hands ``base`` to code that reads
        the attribute elsewhere (``train_one_epoch(..., args=args)`` reading
        ``args.ema_rate`` in another file): a field of a dataclass instance made here, or
        the default of this module's argparse option of that name."""
        try:
            obj = self._object(base, 1)
            if isinstance(obj, _Instance):
                value = self._field_value(obj, attr, 1)
            elif obj is not None:
                return None
            else:
                value = self._argparse_value(base, attr, 1)
        except RecursionError:
            return None
        return value if value is None or _bounded(value.value) else None

    def argument_for(
        self, function: cst.FunctionDef, param: cst.Param, call: cst.Call
    ) -> cst.BaseExpression | None:
        """The expression ``call`` passes for ``param`` (None: not passed, or unknown)."""
        arg = _argument_for(function, param, call)
        return arg if isinstance(arg, cst.BaseExpression) else None

    def self_assignments(self, cls: cst.ClassDef) -> dict[str, list[cst.BaseExpression | None]]:
        """``self.x = value`` in the methods of ``cls``, by attribute (None: augmented)."""
        return self._self_attributes(cls)

    def inherited_assignments(
        self, cls: cst.ClassDef, attr: str
    ) -> list[cst.BaseExpression | None]:
        """What ``self.<attr>`` may hold in a method of ``cls``: its assignments in ``cls``
        and the module's classes it derives from; where those never assign it, the
        assignments of the module's subclasses of ``cls`` (a base class's hook reading what
        each subclass's ``__init__`` sets)."""
        own: list[cst.BaseExpression | None] = []
        for klass in self.lineage(cls):
            own.extend(self._self_attributes(klass).get(attr, []))
        if own:
            return own
        found: list[cst.BaseExpression | None] = []
        for sub in self.subclasses(cls):
            found.extend(self._self_attributes(sub).get(attr, []))
        return found

    def lineage(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """``cls`` and the module's classes it derives from, nearest first."""
        known = self._lineages.get(id(cls))
        if known is not None:
            return known
        chain = [cls]
        at = 0
        while at < len(chain) and len(chain) <= _MAX_BASES:
            for base in chain[at].bases:
                name = base.value
                if isinstance(name, cst.Attribute):
                    continue  # ``pl.LightningModule``: not a class of this module
                classes = self._class_table().get(getattr(name, "value", ""), [])
                if len(classes) == 1 and classes[0] not in chain:
                    chain.append(classes[0])
            at += 1
        self._lineages[id(cls)] = chain
        return chain

    def subclasses(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The module's classes that derive from ``cls``, directly or through others."""
        if self._subclass_table is None:
            table: dict[int, list[cst.ClassDef]] = {}
            for group in self._class_table().values():
                for other in group:
                    for base in self.lineage(other)[1:]:
                        table.setdefault(id(base), []).append(other)
            self._subclass_table = table  # one pass over the classes, not one per question
        return list(self._subclass_table.get(id(cls), ()))

    def assigned_value(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The one expression a name (seen where ``node`` is) or ``self.x`` is assigned, when
        it is assigned exactly once; None otherwise."""
        if isinstance(node, cst.Name):
            bindings = self.bindings_of(node) or []
            if len(bindings) == 1 and bindings[0].kind == "assign":
                return bindings[0].value
            return None
        if (
            isinstance(node, cst.Attribute)
            and isinstance(node.value, cst.Name)
            and node.value.value == "self"
        ):
            cls = self.class_of_self(node)
            if cls is None:
                return None
            values = self.self_assignments(cls).get(node.attr.value, [])
            if len(values) == 1:
                return values[0]
        return None

    def instance_class(self, node: cst.BaseExpression, depth: int = 0) -> cst.ClassDef | None:
        """The module class ``node`` is an instance of: ``ema`` after ``ema = EMA(model)``
        (also ``EMA(model).to(device)``), ``self.ema`` assigned so in a method, or a
        parameter every in-module caller passes one to."""
        if depth > self.MAX_DEPTH:
            return None
        while (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _SAME_OBJECT
        ):
            node = node.func.value
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
            classes = self._class_table().get(node.func.value, [])
            return classes[0] if len(classes) == 1 else None
        if not isinstance(node, (cst.Name, cst.Attribute)):
            return None
        value = self.assigned_value(node)
        if value is not None:
            return self.instance_class(value, depth + 1)
        if isinstance(node, cst.Name):
            bindings = self.bindings_of(node) or []
            if len(bindings) == 1 and bindings[0].kind == "param":
                binding = bindings[0]
                function = binding.function
                if isinstance(function, cst.FunctionDef) and binding.param is not None:
                    found: cst.ClassDef | None = None
                    for call in self.callers(function):
                        arg = self.argument_for(function, binding.param, call)
                        cls = self.instance_class(arg, depth + 1) if arg is not None else None
                        if cls is None or (found is not None and cls is not found):
                            return None
                        found = cls
                    return found
        return None

    def class_of_self(self, node: cst.CSTNode) -> cst.ClassDef | None:
        """The class whose method holds ``node`` (what ``self`` is there)."""
        return self._class_named(cst.Name("self"), node)

    def argparse_options(self) -> dict[str, list[ArgparseOption]]:
        """Every ``add_argument`` of the module, by destination."""
        self._ensure_argparse()
        assert self._argparse is not None
        return self._argparse

    def mapping(self, node: cst.BaseExpression) -> cst.Dict | cst.Call | None:
        """The dict literal or ``dict(...)`` call ``node`` is bound to, if known."""
        obj = self._object(node, 0)
        return obj.node if isinstance(obj, _Mapping) else None

    def mapping_items(self, node: cst.Dict | cst.Call) -> Iterator[tuple[str, cst.BaseExpression]]:
        """String keys and values of a dict literal or ``dict(k=v)`` call."""
        yield from _mapping_items(node)

    # Expressions -----------------------------------------------------------------------------
    def _resolve(self, node: cst.BaseExpression, depth: int) -> Value | None:
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, (cst.Integer, cst.Float)):
            number = literal_number(node)
            return None if number is None else Value(number, node)
        if isinstance(node, cst.SimpleString):
            text = _string(node)
            return None if text is None else Value(text, node)
        if isinstance(node, cst.Name):
            if node.value in ("True", "False", "None"):
                return Value({"True": True, "False": False, "None": None}[node.value], node)
            return self._resolve_name(node, depth)
        if isinstance(node, cst.UnaryOperation):
            inner = self._resolve(node.expression, depth + 1)
            if inner is None:
                return None
            if isinstance(node.operator, cst.Not) and isinstance(inner.value, bool):
                return Value(not inner.value, None, inner.via, inner.shared)
            if not _is_number(inner.value):
                return None
            if isinstance(node.operator, cst.Minus):
                origin = node if inner.origin is node.expression else None
                source = None if origin is not None else inner.written
                return Value(-inner.value, origin, inner.via, inner.shared, source=source)  # type: ignore[operator]
            if isinstance(node.operator, cst.Plus):
                return Value(inner.value, None, inner.via, inner.shared, source=inner.written)
            return None
        if isinstance(node, cst.BinaryOperation):
            return self._resolve_binary(node, depth)
        if isinstance(node, cst.Attribute):
            return self._resolve_attribute(node, depth)
        if isinstance(node, cst.Subscript):
            return self._resolve_subscript(node, depth)
        if isinstance(node, cst.Call):
            return self._resolve_call(node, depth)
        return None

    def _resolve_binary(self, node: cst.BinaryOperation, depth: int) -> Value | None:
        op = _BINARY.get(type(node.operator))
        if op is None:
            return None
        left = self._resolve(node.left, depth + 1)
        if left is None or not _is_number(left.value):
            return None
        right = self._resolve(node.right, depth + 1)
        if right is None or not _is_number(right.value):
            return None
        try:
            result = _fold(op, left.value, right.value)  # type: ignore[arg-type]
        except (ArithmeticError, ValueError, OverflowError):
            return None
        if result is None or isinstance(result, complex):
            return None
        form = left.form or right.form
        if isinstance(node.operator, cst.Power) and left.value in (0.5, 2):
            form = "half-life-samples" if self._per_samples(node.right, depth) else "half-life"
        # ``1 - x``: the literal behind ``x`` is what sets the value; the ``1`` is part of
        # the formula written here.
        source = None
        left_literal = literal_number(node.left) is not None
        right_literal = literal_number(node.right) is not None
        if left_literal and not right_literal:
            source = right.written
        elif right_literal and not left_literal:
            source = left.written
        via, shared = left.via or right.via, left.shared or right.shared
        return Value(result, None, via, shared, form, source)

    def _per_samples(self, exponent: cst.BaseExpression, depth: int) -> bool:
        """``batch / halflife_nimg``: a half-life counted in samples, with the batch size
        (a number above one) over it, as StyleGAN and EDM write their EMAs."""
        if not (
            isinstance(exponent, cst.BinaryOperation) and isinstance(exponent.operator, cst.Divide)
        ):
            return False
        if isinstance(exponent.left, cst.UnaryOperation):
            return False
        numerator = self._resolve(exponent.left, depth + 1)
        return numerator is not None and is_time_constant(numerator.value)

    def _resolve_call(self, node: cst.Call, depth: int) -> Value | None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "get":
            return self._resolve_get(node, depth)
        name = dotted_name(func)
        if name is None:
            return None
        function: Callable[..., object] | None = None
        if name in _BUILTINS and not self._is_bound(name, node):
            function = _BUILTINS[name]
        else:
            for qualified in self.imports.qualified_names(func):
                function = _MATH_FUNCTIONS.get(qualified)
                if function is not None:
                    break
        if function is None or not node.args or any(a.star or a.keyword for a in node.args):
            return None
        values = [self._resolve(a.value, depth + 1) for a in node.args]
        if any(v is None or not _is_number(v.value) for v in values):
            return None
        try:
            result = function(*(v.value for v in values))  # type: ignore[union-attr]
        except (ArithmeticError, ValueError, TypeError, OverflowError):
            return None
        if not _is_number(result) or not _bounded(result):
            return None
        via = next((v.via for v in values if v and v.via), "")
        origin = values[0].origin if len(values) == 1 and name in ("float", "int") else None
        form = "half-life" if function is math.exp else next((v.form for v in values if v), "")
        shared = any(v.shared for v in values if v)
        return Value(result, origin, via, shared, form)  # type: ignore[arg-type]

    def _is_bound(self, name: str, node: cst.CSTNode) -> bool:
        return bool(self._lookup(name, self._scope_of(node)))

    # Names -----------------------------------------------------------------------------------
    def _resolve_name(self, node: cst.Name, depth: int) -> Value | None:
        name = node.value
        bindings = self._lookup(name, self._scope_of(node))
        if bindings is None:
            # Not bound in the module: an import, or a name we know nothing about.
            for qualified in self.imports.qualified_names(node):
                if qualified in _MATH_CONSTANTS:
                    return Value(_MATH_CONSTANTS[qualified], None, qualified)
                return Value(Symbol(qualified), None)
            return None
        if len(bindings) != 1:
            reaching = self._reaching(node, bindings)
            if reaching is None or reaching.value is None:
                return None
            inner = self._resolve(reaching.value, depth + 1)
            if inner is None:
                return None
            return replace(inner, via=inner.via or name, shared=True)
        binding = bindings[0]
        shared = self._name_count(name) > 2
        if binding.kind == "assign" and binding.value is not None:
            inner = self._resolve(binding.value, depth + 1)
            if inner is None:
                return None
            return replace(inner, via=inner.via or name, shared=inner.shared or shared)
        if binding.kind == "param" and binding.param is not None:
            return self._resolve_param(binding, depth)
        if binding.kind == "other" and binding.element is not None:
            inner = self._elements(binding.element, depth + 1)
            if inner is None:
                return None
            return replace(inner, via=inner.via or name, shared=inner.shared or shared)
        if binding.kind == "import":
            for qualified in self.imports.qualified_names(node):
                if qualified in _MATH_CONSTANTS:
                    return Value(_MATH_CONSTANTS[qualified], None, qualified)
                return Value(Symbol(qualified), None)
        return None

    def _elements(self, node: cst.BaseExpression, depth: int) -> Value | None:
        """The one value every element of the sequence ``node`` has: ``[0.9999]``,
        ``(d, d)``, the parsed items of a comma-separated string (``[float(x) for x in
        rates.split(",")]``, guided-diffusion's ``ema_rate="0.9999"``), through the names
        and ``self`` attributes bound to it once. None when they differ or are unknown."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, (cst.List, cst.Tuple)):
            items = node.elements
            if not items or any(isinstance(e, cst.StarredElement) for e in items):
                return None
            return _common([self._resolve(e.value, depth + 1) for e in items])
        if isinstance(node, cst.IfExp):
            chosen = self._truth(node.test, depth + 1)
            if chosen is not None:
                return self._elements(node.body if chosen else node.orelse, depth + 1)
            return _common([self._elements(b, depth + 1) for b in (node.body, node.orelse)])
        if isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            return self._split_items(node, depth)
        if isinstance(node, cst.Call) and dotted_name(node.func) in ("list", "tuple"):
            if len(node.args) == 1 and not node.args[0].star and not node.args[0].keyword:
                return self._elements(node.args[0].value, depth + 1)
            return None
        if isinstance(node, cst.Name):
            binding = self._only_binding(node)
            if binding is not None and binding.kind == "assign" and binding.value is not None:
                inner = self._elements(binding.value, depth + 1)
                return replace(inner, via=inner.via or node.value) if inner else None
            return None
        kept = self.kept_on_self(node)
        return self._elements(kept, depth + 1) if kept is not None else None

    def _split_items(self, node: cst.ListComp | cst.GeneratorExp, depth: int) -> Value | None:
        """``[float(x) for x in text.split(",")]`` of a string that resolves: its items'
        one value (the string literal is the origin when it holds one item)."""
        clause = node.for_in
        if clause.inner_for_in is not None or clause.ifs or not isinstance(clause.target, cst.Name):
            return None
        variable = clause.target.value
        element = node.elt
        if isinstance(element, cst.Call) and dotted_name(element.func) in ("float", "int"):
            if len(element.args) != 1 or element.args[0].keyword or element.args[0].star:
                return None
            element = element.args[0].value
        if not (isinstance(element, cst.Name) and element.value == variable):
            return None
        split = clause.iter
        if not (
            isinstance(split, cst.Call)
            and isinstance(split.func, cst.Attribute)
            and split.func.attr.value == "split"
            and len(split.args) <= 1
        ):
            return None
        separator: str | None = None
        if split.args:
            separator = _string(split.args[0].value)
            if separator is None or split.args[0].keyword or split.args[0].star:
                return None
        text = self._resolve(split.func.value, depth + 1)
        if text is None or not isinstance(text.value, str):
            return None
        numbers = _numbers(text.value, separator)
        if numbers is None:
            return None
        origin = text.origin if len(numbers) == 1 else None
        return Value(numbers[0], origin, text.via, text.shared)

    def _truth(self, test: cst.BaseExpression, depth: int) -> bool | None:
        """``isinstance(x, float)`` (or a tuple of builtin types) of a value that resolves;
        None for any other test."""
        if not (
            isinstance(test, cst.Call)
            and dotted_name(test.func) == "isinstance"
            and not self._is_bound("isinstance", test)
            and len(test.args) == 2
            and not any(a.star or a.keyword for a in test.args)
        ):
            return None
        kinds = test.args[1].value
        names = [e.value for e in kinds.elements] if isinstance(kinds, cst.Tuple) else [kinds]
        types: list[type] = []
        for name in names:
            builtin = _TYPES.get(dotted_name(name) or "") if isinstance(name, cst.Name) else None
            if builtin is None:
                return None
            types.append(builtin)
        value = self._resolve(test.args[0].value, depth + 1)
        if value is None or isinstance(value.value, Symbol):
            return None
        return isinstance(value.value, tuple(types))

    def _resolve_param(self, binding: Binding, depth: int) -> Value | None:
        """A parameter: what every caller in the module passes, or its default."""
        param = binding.param
        function = binding.function
        assert param is not None
        name = param.name.value
        passed: list[cst.BaseExpression] = []
        missing = 0
        if isinstance(function, cst.FunctionDef):
            for call in self._callers(function):
                arg = _argument_for(function, param, call)
                if arg is _STAR:
                    return None
                if arg is None:
                    missing += 1
                else:
                    passed.append(arg)  # type: ignore[arg-type]
        if passed:
            if missing and param.default is None:
                return None
            values = [self._resolve(a, depth + 1) for a in passed]
            if missing:
                default = self._resolve(param.default, depth + 1) if param.default else None
                values.append(default)
            if any(v is None for v in values):
                return None
            first = values[0]
            assert first is not None
            if any(v.value != first.value for v in values if v is not None):
                return None
            origin = first.origin if len(values) == 1 else None
            return Value(first.value, origin, first.via or name, len(values) > 1 or first.shared)
        if param.default is None:
            return None
        inner = self._resolve(param.default, depth + 1)
        if inner is None:
            return None
        return replace(inner, via=inner.via or f"the default of {name}", shared=inner.shared)

    def _reaching(self, node: cst.Name, bindings: list[Binding]) -> Binding | None:
        """The assignment whose value ``node`` reads when the name is bound several times in
        its scope: the last one before the use, in a block that holds the use, with no other
        assignment that a branch or a loop could run in between (``alpha = 1 - decay`` then
        ``alpha = min(1.0, alpha * adjust)``). None when straight-line order does not tell."""
        index = self.index
        use = index.statement(node)
        if use is None or len(bindings) > self.MAX_REBINDINGS:
            return None  # a name rebound all over a module (``x``, ``out``) is no setting
        scope = self._scope_of(node)
        placed: list[tuple[cst.CSTNode, Binding]] = []
        for binding in bindings:
            if binding.kind != "assign" or binding.value is None:
                return None
            statement = index.statement(binding.value)
            if statement is None or self._scope_of(statement) is not scope:
                return None
            placed.append((statement, binding))
        before = [(s, b) for s, b in placed if s is not use and index.is_before(s, use)]
        if not before:
            return None
        statement, binding = max(before, key=lambda item: index.order[id(item[0])])
        block = index.parent(statement)
        if block is None or not index.contains(block, use):
            return None  # assigned in a branch the use is not in
        loops = [
            a
            for a in index.ancestors(use)
            if isinstance(a, (cst.For, cst.While)) and not index.contains(a, statement)
        ]
        # (An assignment between it and the use would be the last one itself: in a branch,
        # the block test above refuses it.)
        for other, _ in placed:
            if other is not statement and any(index.contains(loop, other) for loop in loops):
                return None  # rebound later in a loop that runs the use again
        return binding

    def _only_binding(self, name: cst.Name) -> Binding | None:
        """The binding of ``name`` in its scope, when it is bound exactly once there."""
        bindings = self._lookup(name.value, self._scope_of(name))
        return bindings[0] if bindings and len(bindings) == 1 else None

    def _scope_of(self, node: cst.CSTNode) -> Scope:
        """The innermost function, lambda or class whose body holds ``node``."""
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, _SCOPE_TYPES):
                if isinstance(ancestor, cst.FunctionDef) and _in_header(ancestor, node, self):
                    continue  # defaults and decorators belong to the enclosing scope
                return ancestor
        return None

    def _lookup(self, name: str, scope: Scope) -> list[Binding] | None:
        """The bindings of ``name`` seen from ``scope`` (None: not bound in the module)."""
        scopes = self._scope_table()
        current: Scope = scope
        first = True
        while True:
            key = id(current) if current is not None else 0
            if current is not None and name in self._globals.get(key, set()):
                current = None
                continue
            # A class body is visible only to code directly in it, not to its methods.
            if first or not isinstance(current, cst.ClassDef):
                bindings = scopes.get(key, {}).get(name)
                if bindings:
                    return bindings
            if current is None:
                return None
            first = False
            current = self._parent_scope(current)

    def _parent_scope(self, scope: cst.CSTNode) -> Scope:
        for ancestor in self.index.ancestors(scope):
            if isinstance(ancestor, _SCOPE_TYPES):
                return ancestor
        return None

    def _scope_table(self) -> dict[int, dict[str, list[Binding]]]:
        if self._scopes is not None:
            return self._scopes
        table: dict[int, dict[str, list[Binding]]] = {}
        ctx = self.ctx

        def add(node: cst.CSTNode, name: str, binding: Binding) -> None:
            scope = self._scope_of(node)
            table.setdefault(id(scope) if scope is not None else 0, {}).setdefault(name, []).append(
                binding
            )

        def targets(node: cst.BaseExpression) -> Iterator[cst.Name]:
            if isinstance(node, cst.Name):
                yield node
            elif isinstance(node, (cst.Tuple, cst.List)):
                for element in node.elements:
                    yield from targets(element.value)
            elif isinstance(node, cst.StarredElement):
                yield from targets(node.value)

        for node in ctx.nodes(cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    add(node, target.target.value, Binding("assign", node.value))
                else:
                    for name in targets(target.target):
                        add(node, name.value, Binding("other"))
        for node in ctx.nodes(cst.AnnAssign):
            if isinstance(node.target, cst.Name):
                kind = "assign" if node.value is not None else "annotation"
                if kind == "assign":
                    add(node, node.target.value, Binding("assign", node.value))
        for node in ctx.nodes(cst.AugAssign):
            if isinstance(node.target, cst.Name):
                add(node, node.target.value, Binding("other"))
        for node in ctx.nodes(cst.For):
            sequences = _loop_sequences(node.target, node.iter)
            slots = _target_slots(node.target)
            for name in targets(node.target):
                binding = Binding(
                    "other", element=sequences.get(id(name)), loop=node, slot=slots.get(id(name))
                )
                add(node, name.value, binding)
        for node in ctx.nodes(cst.WithItem):
            if node.asname is not None:
                for name in targets(node.asname.name):
                    add(node, name.value, Binding("other"))
        for node in ctx.nodes(cst.NamedExpr):
            if isinstance(node.target, cst.Name):
                add(node, node.target.value, Binding("other"))
        for node in ctx.nodes(cst.ExceptHandler):
            if node.name is not None and isinstance(node.name.name, cst.Name):
                add(node, node.name.name.value, Binding("other"))
        for node in (*ctx.nodes(cst.Import), *ctx.nodes(cst.ImportFrom)):
            names = node.names
            if isinstance(names, cst.ImportStar):
                continue
            for alias in names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                else:
                    full = dotted_name(alias.name) or ""
                    local = full.split(".", 1)[0] if isinstance(node, cst.Import) else full
                if local:
                    add(node, local, Binding("import"))
        for node in (*ctx.nodes(cst.FunctionDef), *ctx.nodes(cst.ClassDef)):
            add(node, node.name.value, Binding("other"))
        for function in (*ctx.nodes(cst.FunctionDef), *ctx.nodes(cst.Lambda)):
            key = id(function)
            params = function.params
            for param in all_params(params):
                table.setdefault(key, {}).setdefault(param.name.value, []).append(
                    Binding("param", param=param, function=function)
                )
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    table.setdefault(key, {}).setdefault(star.name.value, []).append(
                        Binding("other")
                    )
        for node in (*ctx.nodes(cst.Global), *ctx.nodes(cst.Nonlocal)):
            scope = self._scope_of(node)
            if scope is not None and isinstance(node, cst.Global):
                self._globals.setdefault(id(scope), set()).update(n.name.value for n in node.names)
        # A name bound by ``global x`` inside a function counts as a module binding too.
        for node in ctx.nodes(cst.Global):
            scope = self._scope_of(node)
            if scope is None:
                continue
            for item in node.names:
                local = table.pop(id(scope), {})
                moved = local.pop(item.name.value, [])
                table[id(scope)] = local
                if moved:
                    table.setdefault(0, {}).setdefault(item.name.value, []).extend(moved)
        self._scopes = table
        return table

    def _name_count(self, name: str) -> int:
        if self._name_counts is None:
            self._name_counts = Counter(n.value for n in self.ctx.nodes(cst.Name))
        return self._name_counts[name]

    # Callers ---------------------------------------------------------------------------------
    def _callers(self, function: cst.FunctionDef) -> list[cst.Call]:
        """In-module calls of ``function``: ``f(...)``, ``self.f(...)``, ``Class(...)``."""
        calls = self._calls()
        name = function.name.value
        owner = self._parent_scope(function)
        if isinstance(owner, cst.ClassDef):
            if name == "__init__":
                return [c for c in calls.get(owner.name.value, []) if isinstance(c.func, cst.Name)]
            found = [
                c
                for c in calls.get(name, [])
                if isinstance(c.func, cst.Attribute)
                and isinstance(c.func.value, cst.Name)
                and c.func.value.value in ("self", "cls")
                and self.index.enclosing(c, cst.ClassDef) is owner
            ]
            if name in _CALL_METHODS:
                found += self._instance_calls(owner)
            return found
        found = self._name_callers.get(name)
        if found is None:
            found = [c for c in calls.get(name, []) if isinstance(c.func, cst.Name)]
            self._name_callers[name] = found
        rivals = [f for f in self.index.functions_named(name) if self._parent_scope(f) is owner]
        if len(rivals) > 1:
            return [c for c in found if self._definition_called(c, rivals, owner) is function]
        return found

    def _instance_calls(self, owner: cst.ClassDef) -> list[cst.Call]:
        """Calls of an instance of ``owner`` (or of a module class derived from it):
        ``model(x1, x2, m)`` where ``model = MoCo(...)``, maybe moved (``.cuda()``) or
        wrapped (``DDP(model)``, ``torch.compile(model)``) since. Such a call runs
        ``forward`` (through ``nn.Module.__call__``) or ``__call__``, which is how a momentum
        encoder's update inside ``forward`` gets the value the training loop passes."""
        classes = self._derived(owner.name.value)
        key = frozenset(classes)
        known = self._instance_call_memo.get(key)
        if known is not None:
            return known  # classes of one name (defined in branches, or again): one scan
        candidates = self._may_hold(classes)
        found: list[cst.Call] = []
        for name in sorted(candidates - classes):
            for call in self.index.calls_named(name):
                func = call.func
                if isinstance(func, cst.Name) and self._holds_instance(func, classes, 3):
                    found.append(call)
        order = self.index.order
        found.sort(key=lambda call: order[id(call)])
        self._instance_call_memo[key] = found
        return found

    def _derived(self, name: str) -> set[str]:
        """``name`` and the module's classes derived from it, at any depth (by last name)."""
        if self._subclasses is None:
            subclasses: dict[str, list[str]] = {}
            for cls in self.ctx.nodes(cst.ClassDef):
                assert isinstance(cls, cst.ClassDef)
                for base in cls.bases:
                    last = (dotted_name(base.value) or "").rpartition(".")[2]
                    subclasses.setdefault(last, []).append(cls.name.value)
            self._subclasses = subclasses
        classes = {name}
        pending = [name]
        while pending:
            for sub in self._subclasses.get(pending.pop(), ()):
                if sub not in classes:
                    classes.add(sub)
                    pending.append(sub)
        return classes

    def _may_hold(self, classes: set[str]) -> set[str]:
        """Names some assignment of the module binds to an instance of ``classes`` (made
        there, or a name holding one moved or wrapped): a superset of the names
        ``_holds_instance`` accepts, found without a scope lookup per call. The module's
        assignments are read once into two maps (maker -> names, name -> names it flows
        to), so each question follows only the names it reaches."""
        if self._flows is None:
            made_by: dict[str, set[str]] = {}
            flows: dict[str, set[str]] = {}
            pairs: list[tuple[str, cst.BaseExpression]] = []
            for assign in self.ctx.nodes(cst.Assign):
                for target in assign.targets:
                    if isinstance(target.target, cst.Name):
                        pairs.append((target.target.value, assign.value))
            for annotated in self.ctx.nodes(cst.AnnAssign):
                if isinstance(annotated.target, cst.Name) and annotated.value is not None:
                    pairs.append((annotated.target.value, annotated.value))
            for name, value in pairs:
                expr = value
                while (
                    isinstance(expr, cst.Call)
                    and isinstance(expr.func, cst.Attribute)
                    and expr.func.attr.value in _SAME_OBJECT
                ):
                    expr = expr.func.value
                if isinstance(expr, cst.Name):
                    flows.setdefault(expr.value, set()).add(name)
                elif isinstance(expr, cst.Call):
                    callee = (dotted_name(expr.func) or "").rpartition(".")[2]
                    made_by.setdefault(callee, set()).add(name)
                    first = expr.args[0].value if expr.args and not expr.args[0].star else None
                    if isinstance(first, cst.Name):
                        flows.setdefault(first.value, set()).add(name)
            self._flows = (made_by, flows)
        made_by, flows = self._flows
        names: set[str] = set()
        pending = [n for cls in classes for n in made_by.get(cls, ())]
        while pending:
            name = pending.pop()
            if name in names:
                continue
            names.add(name)
            pending.extend(flows.get(name, ()))
        return names

    def _holds_instance(self, name: cst.Name, classes: set[str], depth: int) -> bool:
        """Every assignment of ``name`` visible here makes an instance of ``classes``."""
        bindings = self.bindings_of(name) or []
        assigned = [b for b in bindings if b.kind == "assign" and b.value is not None]
        if depth <= 0 or not assigned or len(assigned) != len(bindings):
            return False
        # ``model = DDP(model)`` / ``model = model.cuda()`` keeps what ``model`` held.
        made = [b.value for b in assigned if not _rewraps(b.value, name.value)]
        return bool(made) and all(self._constructs(v, classes, depth) for v in made)

    def _constructs(self, expr: cst.BaseExpression, classes: set[str], depth: int) -> bool:
        while (
            isinstance(expr, cst.Call)
            and isinstance(expr.func, cst.Attribute)
            and expr.func.attr.value in _SAME_OBJECT
        ):
            expr = expr.func.value
        if isinstance(expr, cst.Name):
            return self._holds_instance(expr, classes, depth - 1)
        if not isinstance(expr, cst.Call):
            return False
        callee = (dotted_name(expr.func) or "").rpartition(".")[2]
        if callee in classes:
            return True
        # A wrapper given the instance first: DDP(model, ...), torch.compile(model).
        first = expr.args[0].value if expr.args and not expr.args[0].star else None
        return isinstance(first, cst.Name) and self._holds_instance(first, classes, depth - 1)

    def _definition_called(
        self, call: cst.Call, definitions: list[cst.FunctionDef], owner: Scope
    ) -> cst.FunctionDef | None:
        """Which of several ``def``s of one name in one scope ``call`` runs: a call written
        in that scope's own statements runs the last ``def`` above it (a notebook or script
        that redefines ``train_step`` per section); a call in a function defined there runs
        later, so the last ``def`` of the scope."""
        scope = self.index.enclosing(call, *_SCOPE_TYPES)
        if scope is owner:
            above = [d for d in definitions if self.index.is_before(d, call)]
            return above[-1] if above else None
        return definitions[-1]

    def _calls(self) -> dict[str, list[cst.Call]]:
        if self._calls_by_name is None:
            found: dict[str, list[cst.Call]] = {}
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if isinstance(func, cst.Name):
                    found.setdefault(func.value, []).append(call)
                elif isinstance(func, cst.Attribute):
                    found.setdefault(func.attr.value, []).append(call)
            self._calls_by_name = found
        return self._calls_by_name

    # Attributes ------------------------------------------------------------------------------
    def _resolve_attribute(self, node: cst.Attribute, depth: int) -> Value | None:
        attr = node.attr.value
        base = node.value
        # Imported names: torch.float16, math.pi.
        if self._import_rooted(base):
            for qualified in self.imports.qualified_names(node):
                if qualified in _MATH_CONSTANTS:
                    return Value(_MATH_CONSTANTS[qualified], None, qualified)
                return Value(Symbol(qualified), None)
            return None
        # Class constants: Config.EMA_DECAY, self.EMA_DECAY.
        cls = self._class_named(base, node)
        if cls is not None:
            value = self._class_constant(cls, attr, node, depth)
            if value is not None:
                return value
            if isinstance(base, cst.Name) and base.value in ("self", "cls"):
                return self._self_attribute(cls, attr, depth)
            return None
        obj = self._object(base, depth + 1)
        if isinstance(obj, _Instance):
            return self._field_value(obj, attr, depth)
        if obj is not None:
            return None
        found = self._argparse_value(base, attr, depth)
        if found is None and (dotted_name(base) or "").rpartition(".")[2] in _CONFIG_NAMES:
            found = self._config_entry(attr, depth)
        return found

    def config_entry(self, key: str) -> Value | None:
        """The value this module's ``get_config()`` sets ``key`` to, when it sets it once
        (see ``_config_entry``)."""
        return self._config_entry(key, 0)

    def config_key(self, expr: cst.BaseExpression | None) -> tuple[cst.ClassDef, str] | None:
        """``(class, key)`` when ``expr`` reads ``self.config.<key>`` (also ``cfg``,
        ``conf``, ``hparams``) in a method of a top-level class: the jaxline /
        ml_collections experiment reading the config its module's ``get_config()`` builds."""
        if not isinstance(expr, cst.Attribute):
            return None
        holder = expr.value
        if not (
            isinstance(holder, cst.Attribute)
            and holder.attr.value.lstrip("_") in _CONFIG_NAMES
            and isinstance(holder.value, cst.Name)
            and holder.value.value == "self"
        ):
            return None
        cls = self.class_of_self(expr)
        if cls is None or self.index.enclosing(cls, cst.ClassDef, cst.FunctionDef) is not None:
            return None
        return cls, expr.attr.value

    def _config_entry(self, key: str, depth: int) -> Value | None:
        """``config.ema_decay`` read from the config this module builds in ``get_config()``
        (the ml_collections / jaxline protocol: the launcher passes that config, or a part
        of it, to the experiment), when the module sets ``key`` there to one value: a
        ``key=`` keyword of ``dict``/``ConfigDict``, a ``"key":`` entry, ``c.key = ...``."""
        if self._config_entries is None:
            self._config_entries = {}
            for function in self.index.functions_named("get_config"):
                if self.index.enclosing(function, cst.ClassDef, cst.FunctionDef) is not None:
                    continue
                for name, value in _config_assignments(function, self.index):
                    self._config_entries.setdefault(name, []).append(value)
        values = self._config_entries.get(key, [])
        if len(values) != 1:
            return None  # not set there, or set to several values (variants of the config)
        inner = self._resolve(values[0], depth + 1)
        if inner is None:
            return None
        return replace(inner, via=inner.via or f"get_config() {key}")

    def _import_rooted(self, node: cst.BaseExpression) -> bool:
        while isinstance(node, cst.Attribute):
            node = node.value
        if not isinstance(node, cst.Name):
            return False
        bindings = self._lookup(node.value, self._scope_of(node))
        return bool(bindings) and all(b.kind == "import" for b in bindings)  # type: ignore[union-attr]

    def _class_named(self, base: cst.BaseExpression, at: cst.CSTNode) -> cst.ClassDef | None:
        """The module class ``base`` names: ``Config`` or ``self``/``cls`` in its methods."""
        if not isinstance(base, cst.Name):
            return None
        if base.value in ("self", "cls"):
            function = self.index.enclosing(at, cst.FunctionDef)
            owner = self._parent_scope(function) if function is not None else None
            return owner if isinstance(owner, cst.ClassDef) else None
        classes = self._class_table().get(base.value, [])
        if len(classes) == 1:
            bindings = self._lookup(base.value, self._scope_of(at))
            if bindings is not None and len(bindings) == 1:
                return classes[0]
        return None

    def _class_table(self) -> dict[str, list[cst.ClassDef]]:
        if self._classes is None:
            found: dict[str, list[cst.ClassDef]] = {}
            for cls in self.ctx.nodes(cst.ClassDef):
                found.setdefault(cls.name.value, []).append(cls)
            self._classes = found
        return self._classes

    def _class_constant(
        self, cls: cst.ClassDef, attr: str, at: cst.CSTNode, depth: int
    ) -> Value | None:
        bindings = self._scope_table().get(id(cls), {}).get(attr)
        if not bindings or len(bindings) != 1 or bindings[0].kind != "assign":
            return None
        if self._self_attributes(cls).get(attr):
            return None  # also set on instances: not a constant
        if _is_dataclass(cls, self) and not attr.isupper():
            return None  # a field: per instance
        value = bindings[0].value
        assert value is not None
        inner = self._resolve(value, depth + 1)
        if inner is None:
            return None
        return replace(inner, via=inner.via or f"{cls.name.value}.{attr}", shared=inner.shared)

    def _self_attributes(self, cls: cst.ClassDef) -> dict[str, list[cst.BaseExpression | None]]:
        """``self.x = value`` assignments in the methods of ``cls`` (None: not an ``=``)."""
        table = self._self_attrs
        if self._self_attrs_built is False:
            # Every class at once: one pass over the targets, not one per class asked about.
            self._self_attrs_built = True
            for target, value in self._attribute_targets():
                if not (isinstance(target.value, cst.Name) and target.value.value == "self"):
                    continue
                function = self.index.enclosing(target, cst.FunctionDef)
                if function is None:
                    continue
                owner = self._parent_scope(function)
                if not isinstance(owner, cst.ClassDef):
                    continue
                found = table.setdefault(id(owner), {})
                found.setdefault(target.attr.value, []).append(value)
        return table.setdefault(id(cls), {})

    def _attribute_targets(self) -> list[tuple[cst.Attribute, cst.BaseExpression | None]]:
        return self.index.attribute_targets()

    def _self_attribute(self, cls: cst.ClassDef, attr: str, depth: int) -> Value | None:
        assigned = self._self_attributes(cls).get(attr)
        if not assigned and _is_dataclass(cls, self):
            return self._own_field(cls, attr, depth)
        if not assigned or len(assigned) != 1 or assigned[0] is None:
            return None
        inner = self._resolve(assigned[0], depth + 1)
        if inner is None:
            return None
        return replace(inner, via=inner.via or f"self.{attr}", shared=inner.shared)

    # Objects: dataclass instances and mappings -----------------------------------------------
    def _object(self, node: cst.BaseExpression, depth: int) -> _Object | None:
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, cst.Dict):
            return _Mapping(node, None)
        if isinstance(node, cst.Call):
            func = node.func
            if (
                isinstance(func, cst.Name)
                and func.value == "dict"
                and not self._is_bound("dict", node)
            ):
                return _Mapping(node, None)
            cls = self._dataclass_of(node.func, node)
            return _Instance(cls, node) if cls is not None else None
        if isinstance(node, cst.Name):
            binding = self._only_binding(node)
            if binding is None:
                return None
            if binding.kind == "assign" and binding.value is not None:
                obj = self._object(binding.value, depth + 1)
                if isinstance(obj, _Mapping):
                    return _Mapping(obj.node, node.value)
                return obj
            if binding.kind == "param" and binding.param is not None:
                return self._param_object(binding, depth)
            return None
        if isinstance(node, cst.Attribute):
            cls = self._class_named(node.value, node)
            if cls is not None and isinstance(node.value, cst.Name):
                if node.value.value in ("self", "cls"):
                    assigned = self._self_attributes(cls).get(node.attr.value)
                    if assigned and len(assigned) == 1 and assigned[0] is not None:
                        return self._object(assigned[0], depth + 1)
                return None
            outer = self._object(node.value, depth + 1)
            if isinstance(outer, _Instance):
                expr = self._field_expression(outer, node.attr.value)
                if isinstance(expr, cst.Call):
                    expr = _field_default(expr)
                if expr is not None:
                    return self._object(expr, depth + 1)
            return None
        if isinstance(node, cst.Subscript):
            outer = self._object(node.value, depth + 1)
            key = _subscript_key(node)
            if isinstance(outer, _Mapping) and key is not None:
                for k, v in _mapping_items(outer.node):
                    if k == key:
                        return self._object(v, depth + 1)
        return None

    def _param_object(self, binding: Binding, depth: int) -> _Object | None:
        param = binding.param
        assert param is not None
        function = binding.function
        if isinstance(function, cst.FunctionDef):
            callers = self.callers(function)
            objects = []
            # Only a single caller decides (two or more never give one object): the others
            # are not resolved, or copies of one function each resolve every call of it.
            for call in callers if len(callers) == 1 else ():
                arg = _argument_for(function, param, call)
                if arg is None or arg is _STAR:
                    objects = []
                    break
                objects.append(self._object(arg, depth + 1))  # type: ignore[arg-type]
            if len(objects) == 1 and objects[0] is not None:
                return objects[0]
        annotation = param.annotation
        if annotation is not None:
            target = annotation.annotation
            if isinstance(target, cst.SimpleString):
                return None
            cls = self._dataclass_of(target, param)
            if cls is not None:
                return _Instance(cls, None)
        return None

    def _dataclass_of(self, func: cst.BaseExpression, at: cst.CSTNode) -> cst.ClassDef | None:
        if not isinstance(func, cst.Name):
            return None
        classes = self._class_table().get(func.value, [])
        if len(classes) != 1 or not _is_dataclass(classes[0], self):
            return None
        return classes[0]

    def _field_expression(self, obj: _Instance, attr: str) -> cst.BaseExpression | None:
        """The expression that sets field ``attr``: the constructor argument, else its default.
        Positions follow the ``__init__`` fields in order (``field(init=False)`` is none);
        a class of the module under it may add fields before them, so its positions are
        unknown, and a keyword constructor (``TrainState.create``) takes no positions."""
        fields = _dataclass_fields(obj.cls)
        if attr not in [name for name, _ in fields]:
            return None
        names = [name for name, default in fields if _init_field(default)]
        if len(self.lineage(obj.cls)) > 1:
            names = []
        call = obj.call
        if call is not None:
            if isinstance(call.func, cst.Attribute):
                names = []  # ``TrainState.create(...)``: keywords only
            position = 0
            for arg in call.args:
                if arg.star:
                    return None
                if arg.keyword is not None:
                    if arg.keyword.value == attr:
                        return arg.value
                    continue
                if position < len(names) and names[position] == attr:
                    return arg.value
                if not names:
                    return None  # a position that may be the field
                position += 1
        return dict(fields)[attr]

    def _constructions(self, cls: cst.ClassDef) -> list[cst.Call] | None:
        """The module's calls that make an instance of the dataclass-like ``cls``:
        ``Cls(...)``, and ``Cls.create(...)`` for a flax ``TrainState``. None when an
        instance may be of a subclass of the module."""
        if self.subclasses(cls):
            return None
        name = cls.name.value
        calls = self._calls()
        found = [c for c in calls.get(name, []) if isinstance(c.func, cst.Name)]
        keyword_makers = {
            method
            for base in cls.bases
            for qualified in self.imports.qualified_names(base.value)
            for known, method in _KEYWORD_CONSTRUCTORS.items()
            if qualified == known
        }
        for method in keyword_makers:
            found.extend(
                c
                for c in calls.get(method, [])
                if isinstance(c.func, cst.Attribute)
                and isinstance(c.func.value, cst.Name)
                and c.func.value.value == name
            )
        return found

    def _replaced(self, attr: str) -> bool:
        """``x.replace(attr=...)`` / ``dataclasses.replace(x, attr=...)``: an instance
        with another value of the field is made."""
        return any(
            a.keyword is not None and a.keyword.value == attr
            for c in self._calls().get("replace", [])
            for a in c.args
        )

    def _own_field(self, cls: cst.ClassDef, attr: str, depth: int) -> Value | None:
        """``self.decay`` in a method of a dataclass-like class whose field ``decay`` no
        method assigns: what every construction in the module passes for the field (as
        for a parameter of ``__init__``), else the field's default."""
        if "__init__" in self._scope_table().get(id(cls), {}):
            return None  # its own ``__init__``: read as a plain class
        fields = dict(_dataclass_fields(cls))
        if attr not in fields or not _init_field(fields[attr]):
            return None
        calls = self._constructions(cls)
        if calls is None or self._replaced(attr):
            return None
        values: list[Value | None] = []
        for call in calls or [None]:  # type: ignore[list-item]
            values.append(self._field_value(_Instance(cls, call), attr, depth))
        if any(v is None for v in values):
            return None
        first = values[0]
        assert first is not None
        if any(v.value != first.value for v in values if v is not None):
            return None
        if len(values) == 1:
            return first
        return Value(first.value, None, first.via or f"self.{attr}", True, first.form)

    def _field_value(self, obj: _Instance, attr: str, depth: int) -> Value | None:
        expr = self._field_expression(obj, attr)
        if expr is None:
            return None
        if isinstance(expr, cst.Call):
            expr = _field_default(expr)
            if expr is None:
                return None
        inner = self._resolve(expr, depth + 1)
        if inner is None:
            return None
        is_default = obj.call is None or not any(a.value is expr for a in obj.call.args)
        via = f"{obj.cls.name.value}.{attr} default" if is_default else ""
        return replace(inner, via=inner.via or via, shared=inner.shared)

    # Subscripts and .get ---------------------------------------------------------------------
    def _resolve_subscript(self, node: cst.Subscript, depth: int) -> Value | None:
        key = _subscript_key(node)
        if key is None:
            return self._schedule_start(node.value, depth + 1)
        obj = self._object(node.value, depth + 1)
        if not isinstance(obj, _Mapping) or self._mutated(obj, key):
            return None
        for k, v in _mapping_items(obj.node):
            if k == key:
                inner = self._resolve(v, depth + 1)
                if inner is None:
                    return None
                via = inner.via or self.ctx.code(node).strip()
                return replace(inner, via=via, shared=inner.shared)
        return None

    def _schedule_start(self, node: cst.BaseExpression, depth: int) -> Value | None:
        """``momentum_schedule[it]`` of ``cosine_scheduler(args.momentum_teacher, 1, ...)``
        (DINO's teacher): the value a rising schedule of decays starts at, its lowest, which
        every step of the first epochs is close to. Followed through names and the
        arguments a module's callers pass; a schedule that starts below 0.5 (a warmup from
        zero) or falls is not read as a decay."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(node, cst.Name):
            binding = self._only_binding(node)
            if binding is None:
                return None
            if binding.kind == "assign" and binding.value is not None:
                return self._schedule_start(binding.value, depth + 1)
            if binding.kind == "param" and isinstance(binding.function, cst.FunctionDef):
                assert binding.param is not None
                passed = self.arguments_for(binding.function, binding.param)
                starts = [
                    self._schedule_start(a, depth + 1) if a is not None and a is not _STAR else None
                    for _, a in passed
                ]
                return _common(starts) if starts else None
            return None
        if not isinstance(node, cst.Call) or any(a.star for a in node.args):
            return None
        name = (dotted_name(node.func) or "").rpartition(".")[2].lower()
        if "schedul" not in name and name != "linspace":
            return None
        positional = [a.value for a in node.args if a.keyword is None]
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        start_expr = positional[0] if positional else keywords.get("base_value")
        end_expr = positional[1] if len(positional) > 1 else keywords.get("final_value")
        if start_expr is None:
            return None
        start = self._resolve(start_expr, depth + 1)
        if start is None or start.number is None or not 0.5 <= start.number < 1.0:
            return None
        end = self._resolve(end_expr, depth + 1) if end_expr is not None else None
        if end is not None and (end.number is None or end.number < start.number):
            return None
        return replace(start, form="schedule-start")

    def _resolve_get(self, node: cst.Call, depth: int) -> Value | None:
        func = node.func
        assert isinstance(func, cst.Attribute)
        if not node.args or any(a.star or a.keyword for a in node.args) or len(node.args) > 2:
            return None
        key = _string(node.args[0].value)
        if key is None:
            return None
        obj = self._object(func.value, depth + 1)
        if not isinstance(obj, _Mapping) or self._mutated(obj, key):
            return None
        for k, v in _mapping_items(obj.node):
            if k == key:
                inner = self._resolve(v, depth + 1)
                if inner is None:
                    return None
                via = inner.via or f'{self.ctx.code(func.value).strip()}["{key}"]'
                return replace(inner, via=via, shared=inner.shared)
        if _has_star_items(obj.node):
            return None
        if len(node.args) == 2:
            inner = self._resolve(node.args[1].value, depth + 1)
            if inner is None:
                return None
            return replace(inner, via=inner.via, shared=inner.shared)
        return Value(None, None)

    def _mutated(self, obj: _Mapping, key: str) -> bool:
        """Whether the mapping's name is written to after construction (same key, or
        ``update``/``setdefault``/``pop``)."""
        if obj.name is None:
            return False
        written = self._subscript_writes()
        return (
            f"{obj.name}[{key}]" in written
            or f"{obj.name}[None]" in written
            or f"{obj.name}[*]" in written
        )

    def _subscript_writes(self) -> set[str]:
        """``name[key]`` for every ``name[key] = ...`` of the module (``name[None]`` when the
        key is not a string literal), ``name[*]`` for every ``name.update(...)``-like call."""
        if self._subscript_assigned is None:
            written: set[str] = set()
            for node in (*self.ctx.nodes(cst.Assign), *self.ctx.nodes(cst.AugAssign)):
                targets = (
                    [t.target for t in node.targets]
                    if isinstance(node, cst.Assign)
                    else [node.target]
                )
                for target in targets:
                    if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name):
                        written.add(f"{target.value.value}[{_subscript_key(target)}]")
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if (
                    isinstance(func, cst.Attribute)
                    and func.attr.value in ("update", "setdefault", "pop", "__setitem__")
                    and isinstance(func.value, cst.Name)
                ):
                    written.add(f"{func.value.value}[*]")
            self._subscript_assigned = written
        return self._subscript_assigned

    # argparse --------------------------------------------------------------------------------
    def _ensure_argparse(self) -> None:
        if self._argparse is not None:
            return
        options: dict[str, list[ArgparseOption]] = {}
        calls = self._calls()
        for call in calls.get("add_argument", []):
            if not isinstance(call.func, cst.Attribute):
                continue
            option = _argparse_option(call)
            if option is not None:
                options.setdefault(option.dest, []).append(option)
        for call in calls.get("set_defaults", []):
            for arg in call.args:
                if arg.keyword is not None:
                    self._set_defaults[arg.keyword.value] = arg.value
        for option in self._dict_options(calls):
            options.setdefault(option.dest, []).append(option)
        self._argparse = options

    def _dict_options(self, calls: dict[str, list[cst.Call]]) -> Iterator[ArgparseOption]:
        """Options a helper adds from a dict of defaults: ``add_dict_to_argparser(parser,
        defaults)`` (the openai diffusion scripts) makes ``--<key>`` with the dict's value
        as its default and its type. A key written again later (``defaults["k"] = v``, an
        ``update`` with that key) is not known; merging other groups
        (``defaults.update(model_defaults())``) leaves the keys written here."""
        for name, group in calls.items():
            if "argparse" not in name.lower():
                continue
            for call in group:
                if any(a.star for a in call.args):
                    continue
                for arg in call.args:
                    obj = self._object(arg.value, 0)
                    if not isinstance(obj, _Mapping):
                        continue
                    for key, value in _mapping_items(obj.node):
                        if obj.name is not None and self._key_rewritten(obj.name, key):
                            continue
                        flag = f"--{key}"
                        yield ArgparseOption(call, key, flag, value, None, None)

    def _key_rewritten(self, name: str, key: str) -> bool:
        """``name[key] = ...`` or ``name.update(key=...)``/``name.update({key: ...})``; an
        ``update`` that merges another group (``name.update(model_defaults())``) is not."""
        written = self._subscript_writes()
        if f"{name}[{key}]" in written or f"{name}[None]" in written:
            return True
        if f"{name}[*]" not in written:
            return False
        for call in self._calls().get("update", []):
            func = call.func
            if not (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == name
            ):
                continue
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == key:
                    return True
                if isinstance(arg.value, cst.Dict) and any(
                    k == key for k, _ in _mapping_items(arg.value)
                ):
                    return True
                if arg.star == "**":
                    return True
        return False

    def _argparse_value(self, base: cst.BaseExpression, dest: str, depth: int) -> Value | None:
        """``args.ema_decay``: the default of the module's ``--ema-decay`` option."""
        self._ensure_argparse()
        assert self._argparse is not None
        options = self._argparse.get(dest)
        if not options:
            return None
        if not (
            isinstance(base, cst.Name)
            or (isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name))
        ):
            return None
        if self._attribute_written(dest, self.ctx.code(base)):
            return None
        override = self._set_defaults.get(dest)
        values: list[Value] = []
        for option in options:
            expr = override if override is not None else option.default
            if expr is None:
                values.append(Value(option.implicit_default, None, f"{option.flag} default"))
                continue
            inner = self._resolve(expr, depth + 1)
            if inner is None:
                return None
            value = inner.value
            if isinstance(value, str) and option.type_name in ("float", "int"):
                try:
                    value = float(value) if option.type_name == "float" else int(value)
                except ValueError:
                    return None
            uses = self._attribute_count(dest)
            values.append(
                Value(value, inner.origin, f"{option.flag} default", inner.shared or uses > 1)
            )
        first = values[0]
        if any(v.value != first.value for v in values[1:]):
            return None
        if len(values) > 1:
            return Value(first.value, None, first.via, True)
        return first

    def _attribute_written(self, attr: str, base: str) -> bool:
        """Whether ``<base>.<attr>`` may be assigned somewhere: a write on the same base, or
        on any object but ``self``/``cls`` (``self.ema_decay = ema_decay`` in a class of the
        module stores a value; it does not change the parsed arguments)."""
        if self._attr_assigned is None:
            written: dict[str, set[str]] = {}
            for target, _ in self._attribute_targets():
                written.setdefault(target.attr.value, set()).add(self.ctx.code(target.value))
            self._attr_assigned = written
        bases = self._attr_assigned.get(attr, set())
        return any(b == base or b.split(".")[0] not in ("self", "cls") for b in bases)

    def _attribute_count(self, attr: str) -> int:
        if self._attr_counts is None:
            self._attr_counts = Counter(a.attr.value for a in self.ctx.nodes(cst.Attribute))
        return self._attr_counts[attr]


# Helpers -------------------------------------------------------------------------------------
_STAR = object()
STAR = _STAR  # what argument_passed returns when a starred argument may hold it


# The last name of an expression holding a run's configuration (``self.config``, ``cfg``).
_CONFIG_NAMES = ("config", "cfg", "conf", "hparams")
_CONFIG_BUILDERS = ("dict", "ConfigDict", "FrozenConfigDict", "EasyDict")


def _config_assignments(
    function: cst.FunctionDef, index: ModuleIndex
) -> Iterator[tuple[str, cst.BaseExpression]]:
    """Every (key, value) ``function`` writes into a config it builds."""
    for node in index.descendants(function, cst.Call):
        if (
            isinstance(node, cst.Call)
            and (dotted_name(node.func) or "").rpartition(".")[2] in _CONFIG_BUILDERS
        ):
            for arg in node.args:
                if arg.keyword is not None and not arg.star:
                    yield arg.keyword.value, arg.value
    for node in index.descendants(function, cst.Dict):
        if isinstance(node, cst.Dict):
            for element in node.elements:
                if isinstance(element, cst.DictElement):
                    key = _string(element.key)
                    if key is not None:
                        yield key, element.value
    for node in index.descendants(function, cst.Assign):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, cst.Attribute):
                yield target.attr.value, node.value


def _in_header(function: cst.FunctionDef, node: cst.CSTNode, resolver: ValueResolver) -> bool:
    """Whether ``node`` sits in the function's decorators, defaults or annotations."""
    return not resolver.index.contains(function.body, node)


def _rewraps(expr: cst.BaseExpression | None, name: str) -> bool:
    """``expr`` is ``name`` moved or wrapped: ``name.cuda()``, ``DDP(name, ...)``."""
    while isinstance(expr, cst.Call):
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _SAME_OBJECT:
            expr = expr.func.value
        elif expr.args and not expr.args[0].star:
            expr = expr.args[0].value
        else:
            return False
    return isinstance(expr, cst.Name) and expr.value == name


_TYPES: dict[str, type] = {"float": float, "int": int, "str": str, "bool": bool}


def _numbers(text: str, separator: str | None) -> list[float] | None:
    """The items of ``text`` split at ``separator``, when they are one repeated number."""
    numbers: list[float] = []
    for item in text.split(separator):
        try:
            numbers.append(float(item))
        except ValueError:
            return None
    if not numbers or any(n != numbers[0] for n in numbers):
        return None
    return numbers


def _common(values: list[Value | None]) -> Value | None:
    """The value all of ``values`` share (the origin kept when there is one), or None."""
    if not values or any(v is None for v in values):
        return None
    first = values[0]
    assert first is not None
    if any(type(v.value) is not type(first.value) or v.value != first.value for v in values):  # type: ignore[union-attr]
        return None
    if len(values) == 1:
        return first
    return Value(first.value, None, first.via, True, first.form)


def _target_slots(target: cst.BaseExpression) -> dict[int, int]:
    """The position of each name of a flat tuple loop target, by the name's node."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return {}
    return {id(e.value): i for i, e in enumerate(target.elements) if isinstance(e.value, cst.Name)}


def _loop_sequences(
    target: cst.BaseExpression, iterable: cst.BaseExpression
) -> dict[int, cst.BaseExpression]:
    """The sequence each loop variable takes its elements from, by the variable's node:
    ``for x in xs``, ``for a, b in zip(xs, ys)``, ``for i, x in enumerate(xs)``."""
    if isinstance(target, cst.Name):
        return {id(target): iterable}
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(iterable, cst.Call):
        return {}
    names = [e.value for e in target.elements]
    args = iterable.args
    if any(a.star or a.keyword for a in args):
        return {}
    func = dotted_name(iterable.func)
    if func == "zip" and len(args) == len(names):
        return {id(n): a.value for n, a in zip(names, args, strict=True) if isinstance(n, cst.Name)}
    if func == "enumerate" and len(args) == 1 and len(names) == 2:
        second = names[1]
        return {id(second): args[0].value} if isinstance(second, cst.Name) else {}
    return {}


def _positional_names(function: cst.FunctionDef) -> tuple[str, ...]:
    """The names a positional argument of a call binds, in order (``self``/``cls`` dropped):
    with the parameter's name, all ``_argument_for`` reads of the function."""
    params = function.params
    positional = [*params.posonly_params, *params.params]
    names = [p.name.value for p in positional]
    owner_is_method = bool(names) and names[0] in ("self", "cls")
    if owner_is_method:
        names = names[1:]
    return tuple(names)


positional_names = _positional_names  # for the layers above: what a call's positions bind
rewraps = _rewraps  # ``model = DDP(model)`` / ``model = model.cuda()`` keeps the object


def _argument_for(
    function: cst.FunctionDef, param: cst.Param, call: cst.Call
) -> cst.BaseExpression | object | None:
    """The expression a call passes for ``param`` (None: not passed; _STAR: unknown)."""
    return argument_passed(call, _positional_names(function), param.name.value)


def argument_passed(
    call: cst.Call, names: Sequence[str], target: str
) -> cst.BaseExpression | object | None:
    """The expression ``call`` passes for the parameter ``target`` of a function whose
    positional parameters are ``names`` (None: not passed; ``STAR``: unknown, a starred
    argument may hold it)."""
    position = 0
    for arg in call.args:
        if arg.star:
            return _STAR
        if arg.keyword is not None:
            if arg.keyword.value == target:
                return arg.value
            continue
        if position < len(names) and names[position] == target:
            return arg.value
        position += 1
    return None


def _subscript_key(node: cst.Subscript) -> str | None:
    if len(node.slice) != 1:
        return None
    element = node.slice[0].slice
    if isinstance(element, cst.Index):
        return _string(element.value)
    return None


def _mapping_items(node: cst.Dict | cst.Call) -> Iterator[tuple[str, cst.BaseExpression]]:
    if isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.DictElement):
                key = _string(element.key)
                if key is not None:
                    yield key, element.value
        return
    for arg in node.args:
        if arg.keyword is not None and not arg.star:
            yield arg.keyword.value, arg.value


def _has_star_items(node: cst.Dict | cst.Call) -> bool:
    if isinstance(node, cst.Dict):
        return any(isinstance(e, cst.StarredDictElement) for e in node.elements)
    return any(a.star or a.keyword is None for a in node.args)


def _decorator_name(decorator: cst.Decorator) -> str | None:
    target = decorator.decorator
    if isinstance(target, cst.Call):
        target = target.func
    return dotted_name(target)


def _is_dataclass(cls: cst.ClassDef, resolver: ValueResolver) -> bool:
    for decorator in cls.decorators:
        name = _decorator_name(decorator)
        if name in _DATACLASS_DECORATORS:
            return True
        if name is not None:
            for qualified in resolver.imports.qualified_names(
                decorator.decorator.func
                if isinstance(decorator.decorator, cst.Call)
                else decorator.decorator
            ):
                if qualified in _DATACLASS_DECORATORS or qualified.endswith(".dataclass"):
                    return True
    for base in cls.bases:
        name = dotted_name(base.value)
        if name is not None and name.rsplit(".", 1)[-1] in _DATACLASS_BASES:
            return True
        if any(
            q in _DATACLASS_QUALIFIED_BASES for q in resolver.imports.qualified_names(base.value)
        ):
            return True
    return False


def _init_field(default: cst.BaseExpression | None) -> bool:
    """Whether a field is a parameter of the generated ``__init__`` (not ``init=False``)."""
    if not isinstance(default, cst.Call):
        return True
    if (dotted_name(default.func) or "").rsplit(".", 1)[-1] not in _FIELD_FUNCTIONS:
        return True
    return not any(
        a.keyword is not None
        and a.keyword.value == "init"
        and isinstance(a.value, cst.Name)
        and a.value.value == "False"
        for a in default.args
    )


def _dataclass_fields(cls: cst.ClassDef) -> list[tuple[str, cst.BaseExpression | None]]:
    """Fields in order with their default expressions (a ``field(...)`` call stays a call)."""
    fields: list[tuple[str, cst.BaseExpression | None]] = []
    body = cls.body
    if not isinstance(body, cst.IndentedBlock):
        return fields
    for statement in body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                annotation = dotted_name(small.annotation.annotation) or ""
                if annotation.endswith("ClassVar"):
                    continue
                fields.append((small.target.value, small.value))
            elif (
                isinstance(small, cst.Assign)
                and len(small.targets) == 1
                and isinstance(small.targets[0].target, cst.Name)
                and isinstance(small.value, cst.Call)
                and (dotted_name(small.value.func) or "").rsplit(".", 1)[-1] in _FIELD_FUNCTIONS
            ):
                fields.append((small.targets[0].target.value, small.value))
    return fields


def _field_default(call: cst.Call) -> cst.BaseExpression | None:
    """``field(default=X)`` / ``attr.ib(X)`` / ``Field(X)`` -> X; ``default_factory=C`` -> C()."""
    name = (dotted_name(call.func) or "").rsplit(".", 1)[-1]
    if name not in _FIELD_FUNCTIONS:
        return call
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "default":
            return arg.value
        if arg.keyword is not None and arg.keyword.value in ("default_factory", "factory"):
            return cst.Call(arg.value)
    if call.args and call.args[0].keyword is None and not call.args[0].star:
        return call.args[0].value
    return None


def _argparse_option(call: cst.Call) -> ArgparseOption | None:
    flags: list[str] = []
    dest: str | None = None
    default: cst.BaseExpression | None = None
    has_default = False
    type_name: str | None = None
    action: str | None = None
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            text = _string(arg.value)
            if text is None:
                return None
            flags.append(text)
            continue
        key = arg.keyword.value
        if key == "dest":
            dest = _string(arg.value)
        elif key == "default":
            default, has_default = arg.value, True
        elif key == "type":
            type_name = dotted_name(arg.value)
        elif key == "action":
            action = _string(arg.value)
    if not flags:
        return None
    long = [f for f in flags if f.startswith("--")]
    flag = long[0] if long else flags[0]
    if dest is None:
        dest = flag.lstrip("-").replace("-", "_")
    implicit: Scalar = None
    if not has_default:
        if action == "store_true":
            implicit = False
        elif action == "store_false":
            implicit = True
    return ArgparseOption(call, dest, flag, default, implicit, type_name)
