"""What other modules need to know about a module: a small record, never a syntax tree.

A summary is computed once per content (``summarize``) from the module's own per-file
analysis (``AveragingObjects``, ``InPlaceUpdates``, ``ImportTable``, ``ValueResolver``): no
second detector. It holds plain data (JSON-able dataclasses), so it can be cached by the
content's hash and read back without parsing:

- ``classes``: classes that hold averaged weights: subclasses of a table API, or the
  project's own implementation recognised by structure (a deepcopy held and averaged in
  place, a shadow dict filled from ``named_parameters()`` and updated, an
  ``apply_shadow``/``copy_to``/``restore`` protocol, a holder whose method hands one of
  its attributes to an update function of the module: a ``TrainState`` with
  ``ema_update()``), with their decay argument, side, default and warmup, methods, device,
  dtype, buffers and eval mode. A module that averages a network it builds and trains
  itself (MoCo's momentum encoder inside the model) is the trained model, not one;
- ``factories``: functions that build and return an instance of one of those classes
  (``initialize_train_state(config)`` returning a ``TrainState``);
- ``updaters``: functions that average one argument into another (``update_ema(target,
  source, rate)``), with which argument is the average, the live weights and the rate;
- ``steppers``: functions and callable classes whose call runs ``backward()`` and/or the
  optimizer step (a ``NativeScaler``-style ``__call__(loss, optimizer, ...)``), with the
  argument that makes the step conditional;
- ``evaluators``: functions that evaluate, sample or generate with a model argument;
- ``recalibrators``: the project's own ``update_bn`` (``LocalBnUpdates``): which argument is
  the model whose BatchNorm statistics it recomputes, which the loader;
- ``calls``: calls to imported functions passing an averaging object (``train_one_epoch(...,
  model_ema)``), with what the object is (an API, a constructor of another module, a copy);
- ``exports``: names the module imports (re-exports such as ``from .ema import ModelEMA``);
- ``attributes``: attributes a class's methods set to an averaging object (``self.ema =
  EMA(net)``), for subclasses and base classes in other modules whose hooks update it;
- ``forwarded``: averaging weights whose value a top-level function gets from its callers
  in other modules (``update_ema(..., rate=args.ema_rate)`` inside ``train_one_epoch(...,
  args)``), so that the caller judges the value it passes where it writes it.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import libcst as cst

from ema_lint.analysis.objects.api_calls import ApiCalls, dispatch_candidates, dispatch_table
from ema_lint.analysis.objects.apis import API_TABLE, REQUIRED, ApiSpec, Role
from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.objects.recalibration import LocalBnUpdates
from ema_lint.analysis.objects.updates import (
    WEIGHT_METHODS,
    InPlaceUpdate,
    InPlaceUpdates,
    container_of,
    strip_tensor,
)
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.index import ModuleIndex
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import (
    ValueResolver,
    argument_passed,
    is_time_constant,
    positional_names,
)
from ema_lint.analysis.syntax.vocabulary import (
    NOT_WEIGHT_TOKENS,
    averaged_identifier,
    is_averaged_name,
    names_an_average,
    tokens,
)
from ema_lint.analysis.training.decays import HAND_MADE, DecaySettings
from ema_lint.analysis.training.evaluation import EvaluationSites
from ema_lint.analysis.training.forwarded import CALL_METHODS, called_as, forwarding_parameter
from ema_lint.analysis.training.modes import ModeTracker

from ..syntax.params import all_params

MAX_BASES = 5  # base classes followed up a module's own hierarchy
FORMAT = 9  # bumped whenever extraction changes what a record holds

_WEIGHT_WORDS = {"decay", "beta", "momentum", "rate", "tau", "alpha", "ema_decay", "mu"}
_APPLY = ("apply_shadow", "copy_to", "apply", "swap", "set", "swap_in")
_STORE = ("store", "backup", "save_original")
_RESTORE = ("restore", "swap_back", "swap_out")
_NO_GRAD = ("torch.no_grad", "torch.inference_mode", "no_grad", "inference_mode")
_EVAL_NAMES = re.compile(r"(^|_)(eval|evaluate|validate|validation|val|test|sample|generate)", re.I)


@dataclass
class ClassSummary:
    """A class of the module that holds averaged weights."""

    name: str
    line: int
    structure: str  # "subclass", "deepcopy", "shadow-dict", "protocol", "holder"
    kind: str = "ema"  # "ema" or "swa"
    base: str | None = None  # the table API it subclasses
    params: list[str] = field(default_factory=list)
    kwonly: list[str] = field(default_factory=list)
    var_kwargs: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
    weight: str | None = None
    side: str | None = None  # "decay" or "momentum"
    weight_default: float | None = None
    ramp: str | None = None  # "exp_tau", "num_updates"
    ramp_param: str | None = None
    ramp_default: float | None = None
    device: str | None = None  # the argument placing the copy
    cpu: bool = False  # the copy is always put on the CPU
    dtype: str | None = None
    half: bool = False  # the copy is always cast to float16
    buffers: str = ""  # "yes", "no", "copied", "" (unknown)
    eval_on_init: bool = False
    model_copy: str | None = None
    update_methods: list[str] = field(default_factory=list)
    apply_methods: list[str] = field(default_factory=list)
    store_methods: list[str] = field(default_factory=list)
    restore_methods: list[str] = field(default_factory=list)
    in_place: bool = True
    unwraps: bool = False  # copies ``model.module`` of a DDP/DataParallel model itself
    # A method handing out ``(copy, suffix)`` pairs of the deepcopies of ``source`` the
    # class keeps in a list (EDM2's ``PowerFunctionEMA.get()`` shape).
    copy_getter: str | None = None
    getter_pairs: bool = False
    source: str | None = None


@dataclass
class UpdaterSummary:
    """A function averaging its ``live`` argument into its ``average`` argument."""

    name: str
    line: int
    params: list[str]
    average: str
    live: str
    rate: str | None = None
    side: str | None = None
    rate_default: float | None = None
    # Whether the update brings the buffers along: "yes" (a state_dict() average), "copied"
    # (the function copies buffers() too), "no" (parameters only), "" (unknown).
    buffers: str = ""
    # ``def ema(ema_value, value, decay): return ema_value * decay + value * (1 - decay)``:
    # it averages one leaf, so it averages weights only where a tree map applies it to them.
    elementwise: bool = False
    # The rate is first clamped by a warmup (``decay = min(decay, (1 + t) / (10 + t))``).
    ramp: str | None = None


@dataclass
class FactorySummary:
    """A function that returns a new instance of a class of ``classes``."""

    name: str
    line: int
    params: list[str]
    cls: str


@dataclass
class StepperSummary:
    """A function (or a class, through ``__call__``) that runs backward and/or a step."""

    name: str
    line: int
    params: list[str]  # of the function, or of ``__call__`` without self
    backward: bool
    step: bool
    condition: str | None = None  # the argument the step depends on (``update_grad``)
    is_class: bool = False


@dataclass
class EvaluatorSummary:
    """A function that runs a model argument to evaluate, sample or generate."""

    name: str
    line: int
    params: list[str]  # positional-or-keyword, in order, then keyword-only
    unmoded: list[str]  # arguments it runs for evaluation without setting their mode
    sets_mode: list[str] = field(default_factory=list)  # arguments it puts in eval()/train()


@dataclass
class RecalibratorSummary:
    """A function that recomputes a model's BatchNorm statistics over a loader (the
    project's own ``update_bn``/``bn_update``), with the parameters it takes them as."""

    name: str
    line: int
    params: list[str]  # positional-or-keyword, in order
    model: str
    loader: str | None = None


@dataclass
class CallSummary:
    """A call to a name bound by an import, passing an averaging object."""

    callee: str  # the qualified name as written (``engine.train_one_epoch``, ``.e.f``)
    line: int
    position: int | None
    keyword: str | None
    evidence: str  # "api:<qualname>", "ctor:<qualified name>", "copy:<name>"


@dataclass
class ForwardedSummary:
    """A weight of an average that function ``name`` takes from its callers: the argument
    for ``param`` or its ``attribute``. ``api`` is the table API the weight configures ("":
    a hand-written update, weighing ``side``); ``line`` is the line of the use."""

    name: str
    line: int
    params: list[str]  # positional parameters, in order
    param: str
    attribute: str | None
    api: str
    side: str
    use: str
    interval: int = 1
    ramp: int = -1  # index of the API weight's warmup that applies; -1 none, -2 unknown
    used_by: str = ""  # ``update_ema()``, for messages
    instance: bool = False  # ``name`` is a class: calls of its instances run ``forward``
    elements: bool = False  # the weight is an element of what is passed (a list, "a,b")
    # Handed on to an imported function (its absolute name) as the argument ``slot``
    # (a keyword, or "#<position>"): the calling module asks the project whether that
    # function averages and takes its weight there (api, side and use are then unset).
    callee: str = ""
    slot: str = ""
    # ``name`` is a class whose methods read the weight as ``self.config.<attribute>``:
    # set by the ``get_config()`` of a module whose class derives from it.
    config: bool = False


@dataclass
class AttributeSummary:
    """An attribute the methods of class ``cls`` set to an averaging object (``self.ema =
    EMA(net)`` in a base LightningModule), for the classes in other modules that derive
    from it or that it derives from: the hook that updates it may sit in either."""

    cls: str
    line: int
    attr: str
    evidence: str  # as CallSummary.evidence
    kind: str  # the averaging Method ("ema", "swa", "unknown")
    bases: list[str] = field(default_factory=list)  # qualified names of the class's bases


@dataclass(frozen=True)
class ForwardingGroup:
    """The forwarded weights of one function (what a lookup of the function returns)."""

    name: str
    weights: tuple[ForwardedSummary, ...]


@dataclass
class ModuleSummary:
    classes: list[ClassSummary] = field(default_factory=list)
    updaters: list[UpdaterSummary] = field(default_factory=list)
    steppers: list[StepperSummary] = field(default_factory=list)
    evaluators: list[EvaluatorSummary] = field(default_factory=list)
    calls: list[CallSummary] = field(default_factory=list)
    exports: dict[str, list[str]] = field(default_factory=dict)
    recalibrators: list[RecalibratorSummary] = field(default_factory=list)
    factories: list[FactorySummary] = field(default_factory=list)
    forwarded: list[ForwardedSummary] = field(default_factory=list)
    attributes: list[AttributeSummary] = field(default_factory=list)
    # The qualified names of the bases of each top-level class that has some (a project
    # LightningModule's hooks run as Lightning's, through any chain of project classes).
    bases: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModuleSummary:
        if data.get("format") != FORMAT:
            raise ValueError("summary format")
        return cls(
            [ClassSummary(**c) for c in data["classes"]],
            [UpdaterSummary(**u) for u in data["updaters"]],
            [StepperSummary(**s) for s in data["steppers"]],
            [EvaluatorSummary(**e) for e in data["evaluators"]],
            [CallSummary(**c) for c in data["calls"]],
            {k: list(v) for k, v in data["exports"].items()},
            [RecalibratorSummary(**r) for r in data["recalibrators"]],
            [FactorySummary(**f) for f in data["factories"]],
            [ForwardedSummary(**f) for f in data["forwarded"]],
            [AttributeSummary(**a) for a in data["attributes"]],
            {k: list(v) for k, v in data["bases"].items()},
        )

    def forwarding(self, name: str) -> ForwardingGroup | None:
        """The weights function ``name`` takes from its callers, if any."""
        weights = tuple(f for f in self.forwarded if f.name == name)
        return ForwardingGroup(name, weights) if weights else None

    def find(self, name: str) -> object | None:
        # A recalibration helper also runs the model without grad: it is the more specific fact.
        groups = (
            self.classes,
            self.updaters,
            self.steppers,
            self.recalibrators,
            self.evaluators,
            self.factories,
        )
        for group in groups:
            for item in group:
                if item.name == name:
                    return item
        return None


# Extraction --------------------------------------------------------------------------------
def _passes_keywords_up(index: ModuleIndex, init: cst.FunctionDef) -> set[str] | None:
    """The parameters ``init`` keeps for itself when it hands the rest to its base
    (``super().__init__(**kwargs)``), or None when it does not."""
    star = init.params.star_kwarg
    if not isinstance(star, cst.Param):
        return None
    name = star.name.value
    for call in index.descendants(init, cst.Call):
        assert isinstance(call, cst.Call)
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "__init__"
            and isinstance(func.value, cst.Call)
            and dotted_name(func.value.func) == "super"
            and any(
                a.star == "**" and isinstance(a.value, cst.Name) and a.value.value == name
                for a in call.args
            )
        ):
            return {p.name.value for p in all_params(init.params)}
    return None


# Keywords that may carry an averaging weight into a function whose name does not say it
# averages (``soft_update(target, source, tau=tau)``).
_WEIGHT_KEYWORDS = frozenset(
    {"decay", "rate", "momentum", "beta", "tau", "polyak", "ema_decay", "ema_rate", "ema_momentum"}
)


def summarize(
    module: cst.Module,
    path: str,
    source: bytes | str | None = None,
    absolute: Callable[[str], str | None] | None = None,
) -> ModuleSummary:
    """The summary of a parsed module (its own analysis, no other file read). ``source``,
    the text the module was parsed from, saves generating it again for the lines;
    ``absolute`` names its relative imports from its package (``.nn`` -> ``pkg.nn``)."""
    ctx = FileContext(module, path, absolute=absolute)
    return _Extractor(ctx).run(source)


def evaluation_name(name: str) -> bool:
    """A function name that says it evaluates, samples or generates."""
    return _EVAL_NAMES.search(name) is not None


def _pairs_of(value: cst.BaseExpression | None, lists: dict[str, tuple[str, bool]]) -> str | None:
    """The ``self`` list of copies a ``[(copy, ...) for ... in ...]`` pairs up, by name:
    ``for ema in self.emas`` or ``for std, ema in zip(self.stds, self.emas)``."""
    if not isinstance(value, cst.ListComp) or value.for_in.inner_for_in is not None:
        return None
    elt = value.elt
    if not isinstance(elt, cst.Tuple) or len(elt.elements) < 2:
        return None
    if not isinstance(elt.elements[0].value, cst.Name):
        return None
    first = elt.elements[0].value.value
    target, iterable = value.for_in.target, value.for_in.iter
    sequence: cst.BaseExpression | None = None
    if isinstance(target, cst.Name) and target.value == first:
        sequence = iterable
    elif (
        isinstance(target, cst.Tuple)
        and isinstance(iterable, cst.Call)
        and dotted_name(iterable.func) == "zip"
        and len(iterable.args) == len(target.elements)
    ):
        for element, arg in zip(target.elements, iterable.args, strict=True):
            if isinstance(element.value, cst.Name) and element.value.value == first:
                sequence = arg.value
    if (
        isinstance(sequence, cst.Attribute)
        and dotted_name(sequence.value) == "self"
        and sequence.attr.value in lists
    ):
        return sequence.attr.value
    return None


def _params(function: cst.FunctionDef, skip_self: bool) -> tuple[list[str], list[str], bool]:
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    if skip_self and params:
        params = params[1:]
    kwonly = [p.name.value for p in function.params.kwonly_params]
    return params, kwonly, isinstance(function.params.star_kwarg, cst.Param)


class _Extractor:
    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.imports = ctx.get(ImportTable)
        self.resolver = ctx.get(ValueResolver)
        self._objects: AveragingObjects | None = None
        self._updates: list[InPlaceUpdate] | None = None
        self._pending: list[tuple[Any, cst.CSTNode]] = []
        self._module_updaters: dict[str, UpdaterSummary] | None = None

    @property
    def objects(self) -> AveragingObjects:
        if self._objects is None:
            self._objects = self.ctx.get(AveragingObjects)
        return self._objects

    @property
    def updates(self) -> list[InPlaceUpdate]:
        if self._updates is None:
            self._updates = self.ctx.get(InPlaceUpdates).updates
        return self._updates

    def run(self, source: bytes | str | None = None) -> ModuleSummary:
        summary = self._collect()
        if self._pending:
            self._fill_lines(source)
        return summary

    def _fill_lines(self, source: bytes | str | None) -> None:
        """Lines of the recorded definitions and calls, from Python's own (fast) parser:
        a position pass over the libcst tree costs as much as the summary itself. Only the
        calls whose callee ends in a recorded callee's last name are spelled out."""
        try:
            tree = ast.parse(self.ctx.module.code if source is None else source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return
        wanted = {
            self._code(node.func).rsplit(".", 1)[-1].strip()
            for _, node in self._pending
            if isinstance(node, cst.Call)
        }
        definitions: dict[tuple[str, str], list[int]] = {}
        calls: dict[str, list[int]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                kind = "class" if isinstance(node, ast.ClassDef) else "def"
                definitions.setdefault((kind, node.name), []).append(node.lineno)
            elif isinstance(node, ast.Call) and wanted:
                func = node.func
                last = (
                    func.id
                    if isinstance(func, ast.Name)
                    else func.attr
                    if isinstance(func, ast.Attribute)
                    else None
                )
                if last is not None and last not in wanted:
                    continue
                calls.setdefault(ast.unparse(func), []).append(
                    node.lineno * 100_000 + node.col_offset
                )
        for found in (*definitions.values(), *calls.values()):
            found.sort()
        seen: dict[str, int] = {}
        nth: dict[int, int] = {}  # a call recorded once per averaging argument: one place
        for record, node in self._pending:
            if isinstance(node, cst.Call):
                key = self._code(node.func)
                index = nth.get(id(node))
                if index is None:
                    index = nth[id(node)] = seen.get(key, 0)
                    seen[key] = index + 1
                found = calls.get(key, [])
                if index < len(found):
                    record.line = found[index] // 100_000
            elif isinstance(node, (cst.ClassDef, cst.FunctionDef)):
                kind = "class" if isinstance(node, cst.ClassDef) else "def"
                lines = definitions.get((kind, node.name.value), [])
                if lines:
                    record.line = lines[0]

    def _collect(self) -> ModuleSummary:
        summary = ModuleSummary()
        summary.exports = {k: list(v) for k, v in self.imports.aliases.items()}
        for node in self.ctx.nodes(cst.ClassDef):
            if self.index.enclosing(node, cst.ClassDef, cst.FunctionDef) is not None:
                continue
            found = self._class(node)
            if found is not None:
                summary.classes.append(found)
            stepper = self._class_stepper(node)
            if stepper is not None:
                summary.steppers.append(stepper)
        for node in self.ctx.nodes(cst.FunctionDef):
            if self.index.enclosing(node, cst.ClassDef, cst.FunctionDef) is not None:
                continue
            updater = self._updater(node)
            if updater is not None:
                summary.updaters.append(updater)
                continue
            stepper = self._stepper(node, node.name.value, False)
            if stepper is not None:
                summary.steppers.append(stepper)
            evaluator = self._evaluator(node)
            if evaluator is not None:
                summary.evaluators.append(evaluator)
        summary.recalibrators = self._recalibrators()
        summary.calls = self._calls()
        summary.factories = self._factories({c.name for c in summary.classes})
        summary.forwarded = self._forwarded()
        summary.attributes = self._attributes()
        summary.bases = self._bases()
        return summary

    def _bases(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for cls in self.ctx.nodes(cst.ClassDef):
            if cls.bases and self.index.enclosing(cls, cst.ClassDef, cst.FunctionDef) is None:
                found[cls.name.value] = self._base_names(cls)
        return found

    def _base_names(self, cls: cst.ClassDef) -> list[str]:
        """Qualified names of the bases of ``cls`` (as written when no import names them)."""
        found: list[str] = []
        for base in cls.bases:
            names = self.imports.qualified_names(base.value)
            name = names[0] if names else dotted_name(base.value)
            if name:
                found.append(name)
        return found

    def _attributes(self) -> list[AttributeSummary]:
        """``self.x = <averaging object>`` in the methods of the module's top-level classes."""
        found: list[AttributeSummary] = []
        if not self.objects.objects:
            return found
        for cls in self.ctx.nodes(cst.ClassDef):
            if self.index.enclosing(cls, cst.ClassDef, cst.FunctionDef) is not None:
                continue
            bases = self._base_names(cls)
            for attr, values in self.resolver.self_assignments(cls).items():
                for value in values:
                    obj = self.objects.for_expression(value) if value is not None else None
                    if obj is None:
                        continue
                    evidence = self._evidence(value)
                    if evidence is None:
                        continue
                    record = AttributeSummary(cls.name.value, 0, attr, evidence, obj.kind.value)
                    record.bases = bases
                    found.append(self._at(record, cls))
                    break
        return found

    # Helpers ---------------------------------------------------------------------------------
    def _line(self, node: cst.CSTNode) -> int:
        return 0  # filled in by run(), in one position pass

    def _at(self, record: Any, node: cst.CSTNode) -> Any:
        self._pending.append((record, node))
        return record

    def _code(self, node: cst.CSTNode) -> str:
        return self.ctx.code(node)

    def _methods(self, cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
        found: dict[str, cst.FunctionDef] = {}
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        for statement in body:
            if isinstance(statement, cst.FunctionDef):
                found.setdefault(statement.name.value, statement)
        return found

    def _literal(self, expr: cst.BaseExpression | None) -> Any:
        if expr is None:
            return REQUIRED
        value = self.resolver.resolve(expr)
        if value is None:
            return None
        raw = value.value
        return raw if isinstance(raw, (int, float, str, bool)) or raw is None else None

    def _calls_named(self, node: cst.CSTNode, *methods: str) -> list[cst.Call]:
        return [
            c
            for c in self.index.descendants(node, cst.Call)
            if isinstance(c, cst.Call)
            and isinstance(c.func, cst.Attribute)
            and c.func.attr.value in methods
        ]

    # Classes ---------------------------------------------------------------------------------
    def _class(self, cls: cst.ClassDef) -> ClassSummary | None:
        methods = self._methods(cls)
        init = methods.get("__init__")
        base = self._table_base(cls)
        updates = [u for u in self.updates if self.index.contains(cls, u.node)]
        averaged = [u for u in updates if self._class_update(u)]
        copies = [
            o
            for o in self.objects.objects
            if o.module_copy and self.index.contains(cls, o.creation)
        ]
        protocol = ("apply_shadow" in methods and "restore" in methods) or (
            "copy_to" in methods and ("store" in methods or "restore" in methods)
        )
        if base is None and averaged and self._trains_own_source(cls, methods, averaged):
            return None  # a model holding its own momentum encoder, not an averaged copy
        if base is not None:
            structure = "subclass"
        elif copies and averaged:
            structure = "deepcopy"
        elif averaged:
            structure = "shadow-dict"
        else:
            named = names_an_average(cls.name.value) or is_averaged_name(cls.name.value)
            held = self._held_copy(init) if init is not None else None
            attributes = self.resolver.self_assignments(cls)
            if protocol and (named or any("shadow" in tokens(a) for a in attributes)):
                structure = "protocol"
            elif named and held is not None and "update" in methods:
                # timm's ModelEma shape: the update goes through a function the per-file
                # analysis does not follow (``copy_(update_fn(e, m))``).
                structure = "deepcopy"
            elif self._holder_methods(methods):
                structure = "holder"
            else:
                return None
        summary = self._at(ClassSummary(cls.name.value, 0, structure), cls)
        if base is not None:
            spec = API_TABLE.get(base)
            summary.base = base
            if spec is not None and init is None:
                summary.params = list(spec.params)
                summary.kwonly = list(spec.kwonly)
                summary.defaults = {k: v for k, v in spec.defaults.items() if _jsonable(v)}
        if init is not None:
            summary.params, summary.kwonly, summary.var_kwargs = _params(init, True)
            for param in all_params(init)[1:] if _params(init, False)[0] else []:
                summary.defaults[param.name.value] = self._literal(param.default)
        if "swa" in tokens(cls.name.value):
            summary.kind = "swa"
        for name, method in methods.items():
            if any(self.index.contains(method, u.node) for u in averaged):
                summary.update_methods.append(name)
            elif name in _APPLY:
                summary.apply_methods.append(name)
            elif name in _STORE:
                summary.store_methods.append(name)
            elif name in _RESTORE:
                summary.restore_methods.append(name)
        if structure == "holder":
            held_by = self._holder_methods(methods)
            summary.update_methods = list(held_by)
            summary.model_copy = next(iter(held_by.values()))
        if not summary.update_methods and "update" in methods:
            summary.update_methods.append("update")
        if copies:
            holder = copies[0]
            for name in holder.names:
                if name.startswith("self."):
                    summary.model_copy = name[len("self.") :]
                    break
        if not averaged and init is not None and summary.structure in ("deepcopy", "protocol"):
            self._named_weight(summary, init)
            held = self._held_copy(init)
            if held is not None:
                summary.model_copy = summary.model_copy or held
            text = self._code(cls)
            if "state_dict()" in text:
                summary.buffers = "yes"
            elif "buffers()" in text:
                summary.buffers = "copied"
        if averaged:
            self._weight(summary, averaged, init)
            if summary.weight is None and init is not None:
                self._own_weight(summary, init)  # a weight the update reads from elsewhere
            summary.buffers = self._buffers(cls, averaged, copies)
            summary.in_place = all(u.form != "assign" or u.shadow_container for u in averaged)
        if init is not None:
            self._pairs_getter(summary, methods, init)
            self._placement(summary, init)
            summary.unwraps = self._unwraps(init)
            if summary.cpu and self._offloads(cls, init):
                summary.cpu = False
        return summary

    def _trains_own_source(
        self, cls: cst.ClassDef, methods: dict[str, cst.FunctionDef], averaged: list[InPlaceUpdate]
    ) -> bool:
        """A module whose ``forward`` trains the network its updates average from, built
        by the class itself (MoCo's ``self.momentum_encoder`` following its own
        ``self.base_encoder``): an instance is the model being trained, wrapped, moved and
        evaluated as one; the average is inside it. An averaging helper is handed the live
        model (``self.model = model``) or given it at each update."""
        if "forward" not in methods:
            return False
        assigned = self.resolver.self_assignments(cls)
        init = methods.get("__init__")
        params = {p.name.value for p in all_params(init)} if init is not None else set()
        for update in averaged:
            source = update.source_container
            if not (
                isinstance(source, cst.Attribute)
                and isinstance(source.value, cst.Name)
                and source.value.value == "self"
            ):
                return False
            values = assigned.get(source.attr.value, [])
            if not values or any(
                v is None or (isinstance(v, cst.Name) and v.value in params) for v in values
            ):
                return False
        return True

    def _offloads(self, cls: cst.ClassDef, init: cst.FunctionDef) -> bool:
        """The CPU placement of ``__init__`` is an offload the class manages: another method
        moves tensors between devices itself (``.cpu()``, ``.to(...)``, ``.cuda()``, pinned
        memory, ``non_blocking`` copies), or ``__init__`` puts the copy on the CPU only
        under a condition (a flag or a device argument)."""
        for call in self._calls_named(init, "cpu", "to"):
            if any(isinstance(a, (cst.If, cst.IfExp)) for a in self._between(call, init)):
                return True
        for call in self._calls_named(cls, "cpu", "to", "cuda", "pin_memory"):
            if not self.index.contains(init, call):
                return True
        return False

    def _between(self, node: cst.CSTNode, top: cst.CSTNode):
        for ancestor in self.index.ancestors(node):
            if ancestor is top:
                return
            yield ancestor

    def _updaters_by_name(self) -> dict[str, UpdaterSummary]:
        """The module's own update functions (``_updater``), by name."""
        if self._module_updaters is None:
            self._module_updaters = {}
            for node in self.ctx.nodes(cst.FunctionDef):
                if self.index.enclosing(node, cst.ClassDef, cst.FunctionDef) is not None:
                    continue
                found = self._updater(node)
                if found is not None:
                    self._module_updaters[node.name.value] = found
        return self._module_updaters

    def _holder_methods(self, methods: dict[str, cst.FunctionDef]) -> dict[str, str]:
        """Methods that hand an attribute of ``self`` to an update function of the module as
        its average (``def ema_update(self, rate): ema(self.nnet_ema, self.nnet, rate)``),
        with that attribute; the attribute is named as averaged."""
        updaters = self._updaters_by_name() if methods else {}
        found: dict[str, str] = {}
        if not updaters:
            return found
        for name, method in methods.items():
            if name.startswith("__"):
                continue
            for call in self.index.descendants(method, cst.Call):
                if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Name):
                    continue
                updater = updaters.get(call.func.value)
                if updater is None:
                    continue
                argument = self._argument(call, updater.params, updater.average)
                if (
                    isinstance(argument, cst.Attribute)
                    and isinstance(argument.value, cst.Name)
                    and argument.value.value == "self"
                    and is_averaged_name(argument.attr.value)
                ):
                    found[name] = argument.attr.value
                    break
        return found

    @staticmethod
    def _argument(call: cst.Call, params: list[str], name: str) -> cst.BaseExpression | None:
        """What ``call`` passes for the parameter ``name`` of ``params`` (None: unknown)."""
        found = argument_passed(call, params, name)
        return found if isinstance(found, cst.BaseExpression) else None

    def _factories(self, classes: set[str]) -> list[FactorySummary]:
        """Module-level functions returning a new instance of one of ``classes``: ``return
        Cls(...)``, or a name bound to ``Cls(...)`` in the function and returned."""
        found: list[FactorySummary] = []
        if not classes:
            return found
        for function in self.ctx.nodes(cst.FunctionDef):
            if self.index.enclosing(function, cst.ClassDef, cst.FunctionDef) is not None:
                continue
            if function.name.value in classes:
                continue
            made: str | None = None
            for ret in self.index.descendants(function, cst.Return):
                if not isinstance(ret, cst.Return) or ret.value is None:
                    continue
                if self.index.enclosing(ret, cst.FunctionDef) is not function:
                    continue
                value: cst.BaseExpression | None = ret.value
                if isinstance(value, cst.Name):
                    value = self.resolver.assigned_value(value)
                name = (
                    value.func.value
                    if isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
                    else None
                )
                if name not in classes or (made is not None and name != made):
                    made = None
                    break
                made = name
            if made is not None:
                params = [p.name.value for p in all_params(function)]
                found.append(
                    self._at(FactorySummary(function.name.value, 0, params, made), function)
                )
        return found

    def _unwraps(self, init: cst.FunctionDef) -> bool:
        """``deepcopy(model.module if is_parallel(model) else model)``, ``de_parallel(model)``."""
        for call in self.index.descendants(init, cst.Call):
            if not isinstance(call, cst.Call) or not call.args:
                continue
            if not (dotted_name(call.func) or "").endswith("deepcopy"):
                continue
            argument = call.args[0].value
            if isinstance(argument, cst.Name):
                continue
            text = self._code(argument).lower()
            if ".module" in text or "parallel" in text or "unwrap" in text:
                return True
        return False

    def _pairs_getter(
        self, summary: ClassSummary, methods: dict[str, cst.FunctionDef], init: cst.FunctionDef
    ) -> None:
        """``self.emas = [copy.deepcopy(net) for _ in stds]`` in ``__init__`` and a method
        ``get(self)`` returning ``[(ema, suffix) for std, ema in zip(self.stds,
        self.emas)]``: the method hands out the copies, in the mode of ``net`` (or eval,
        when the copy's chain says ``.eval()``)."""
        params = {p.name.value for p in all_params(init)[1:]}
        lists: dict[str, tuple[str, bool]] = {}
        for assign in self.index.descendants(init, cst.Assign):
            assert isinstance(assign, cst.Assign)
            target = assign.targets[0].target
            value = assign.value
            if not (
                len(assign.targets) == 1
                and isinstance(target, cst.Attribute)
                and dotted_name(target.value) == "self"
                and isinstance(value, cst.ListComp)
            ):
                continue
            node: cst.BaseExpression = value.elt
            evaluated: bool | None = None  # the outermost mode call is the last applied
            while (
                isinstance(node, cst.Call)
                and isinstance(node.func, cst.Attribute)
                and node.func.attr.value != "deepcopy"
            ):
                if evaluated is None and node.func.attr.value in ("eval", "train"):
                    evaluated = node.func.attr.value == "eval"
                node = node.func.value
            if not (
                isinstance(node, cst.Call)
                and (dotted_name(node.func) or "").endswith("deepcopy")
                and len(node.args) == 1
                and isinstance(node.args[0].value, cst.Name)
                and node.args[0].value.value in params
            ):
                continue
            lists[target.attr.value] = (node.args[0].value.value, bool(evaluated))
        if not lists:
            return
        for name, method in methods.items():
            if name.startswith("_") or len(all_params(method)) != 1:
                continue
            for ret in self.index.descendants(method, cst.Return):
                held = _pairs_of(ret.value, lists)  # type: ignore[attr-defined]
                if held is None:
                    continue
                summary.copy_getter, summary.getter_pairs = name, True
                summary.source, evaluated = lists[held]
                summary.eval_on_init = summary.eval_on_init or evaluated
                return

    def _held_copy(self, init: cst.FunctionDef) -> str | None:
        """The ``self`` attribute ``__init__`` binds to a deepcopy of an argument."""
        params = {p.name.value for p in all_params(init)}
        for call in self.index.descendants(init, cst.Call):
            if not isinstance(call, cst.Call) or not (dotted_name(call.func) or "").endswith(
                "deepcopy"
            ):
                continue
            if not call.args or self._param_of(call.args[0].value) not in params:
                continue
            for ancestor in self.index.ancestors(call):
                if isinstance(ancestor, cst.Assign):
                    target = ancestor.targets[0].target
                    if (
                        isinstance(target, cst.Attribute)
                        and isinstance(target.value, cst.Name)
                        and target.value.value == "self"
                    ):
                        return target.attr.value
                    break
                if isinstance(ancestor, cst.BaseStatement):
                    break
        return None

    def _named_weight(self, summary: ClassSummary, init: cst.FunctionDef) -> None:
        """The weight argument by name, when no update of the class could be read: its side
        from its default (a decay is close to one, a momentum close to zero)."""
        if self._own_weight(summary, init):
            return
        for param in all_params(init):
            name = param.name.value
            if name not in _WEIGHT_WORDS:
                continue
            default = self._literal(param.default)
            if not isinstance(default, (int, float)) or isinstance(default, bool):
                return
            summary.weight, summary.weight_default = name, float(default)
            summary.side = "decay" if default >= 0.5 else "momentum"
            return

    def _own_weight(self, summary: ClassSummary, init: cst.FunctionDef) -> bool:
        """The library's own source of a table API (ignite's ``EMAHandler`` in
        ``ignite/handlers/ema_handler.py``): the table says which side its weight is, where
        the default cannot (a momentum of 0.9998 is still a momentum)."""
        own = self._table_spec_defined_here(summary.name)
        if own is None or own.weight is None:
            return False
        for param in all_params(init):
            if param.name.value != own.weight.param:
                continue
            default = self._literal(param.default)
            summary.weight, summary.side = own.weight.param, own.weight.side.value
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                summary.weight_default = float(default)
            return True
        return False

    def _library_source(self, cls: cst.ClassDef, init: cst.FunctionDef) -> ClassSummary | None:
        """The library's own source of a table averaging class whose update the per-file
        analysis cannot follow (ema-pytorch's ``EMA``: the copy made in a method ``__init__``
        calls, the lerp behind a ``partial``): a record whose weight is the table's, so the
        default written in ``__init__`` is judged with the table's semantics and ramps.
        Only for the weight defaults of the module itself (not a summary for other files)."""
        own = self._table_spec_defined_here(cls.name.value)
        if own is None or own.weight is None or own.role is not Role.EMA_MODEL:
            return None
        summary = self._at(ClassSummary(cls.name.value, 0, "library"), cls)
        summary.base = own.qualname
        summary.params, summary.kwonly, summary.var_kwargs = _params(init, True)
        if own.weight.param not in (*summary.params, *summary.kwonly):
            return None
        return summary

    def _table_spec_defined_here(self, name: str) -> ApiSpec | None:
        """The table API this module defines under ``name``, when the file's path ends with
        the API's module (``.../ignite/handlers/ema_handler.py`` for
        ``ignite.handlers.ema_handler.EMAHandler``)."""
        path = self.ctx.path.replace("\\", "/")
        if not path.endswith(".py"):
            return None
        parts = [p for p in path[: -len(".py")].split("/") if p]
        if parts and parts[-1] == "__init__":
            parts.pop()
        for start in range(len(parts)):
            spec = API_TABLE.get(".".join((*parts[start:], name)))
            if spec is not None:
                return spec
        return None

    def _table_base(self, cls: cst.ClassDef) -> str | None:
        for base in cls.bases:
            name = self.imports.resolve(base.value, API_TABLE.by_name)
            if name is not None and API_TABLE.by_name[name].role in (
                Role.EMA_MODEL,
                Role.SWA_MODEL,
            ):
                return API_TABLE.by_name[name].qualname
        return None

    def _class_update(self, update: InPlaceUpdate) -> bool:
        if self.objects.averages_weights(update):
            return True
        obj = self.objects.of_update(update)
        return obj is not None and obj.module_copy

    def _weight(
        self, summary: ClassSummary, updates: list[InPlaceUpdate], init: cst.FunctionDef | None
    ) -> None:
        if init is None:
            return
        init_params = {p.name.value: p for p in all_params(init)}
        for update in updates:
            for coefficient, side in (
                (update.old_weight, "decay"),
                (update.new_weight, "momentum"),
            ):
                if coefficient is None:
                    continue
                expr, complement = _unwrap(coefficient.expr, coefficient.complement)
                if complement:
                    side = "decay" if side == "momentum" else "momentum"
                expanded = self._expand(expr, init)
                names = [n for n in expanded if n in init_params and n != "self"]
                # A parameter whose default is above one is a horizon (a ramp's tau, a
                # half-life in steps), never the weight, unless it is named as a weight.
                weights = [
                    n
                    for n in names
                    if n in _WEIGHT_WORDS
                    or not is_time_constant(self._literal(init_params[n].default))
                ]
                if not weights:
                    continue
                weight = next((n for n in weights if n in _WEIGHT_WORDS), weights[0])
                summary.weight = weight
                summary.side = side
                default = self._literal(init_params[weight].default)
                if isinstance(default, (int, float)) and not isinstance(default, bool):
                    summary.weight_default = float(default)
                text = expanded.get("", "")
                if "exp(" in text:
                    summary.ramp = "exp_tau"
                    # The time constant: another parameter with a default above one (not
                    # the update counter the ramp is evaluated at, ``updates=0``).
                    others = [n for n in names if n != weight]
                    horizons = [
                        n for n in others if is_time_constant(self._literal(init_params[n].default))
                    ]
                    tau = next(iter(horizons or others), None)
                    summary.ramp_param = tau
                    if tau is not None:
                        tau_default = self._literal(init_params[tau].default)
                        if isinstance(tau_default, (int, float)):
                            summary.ramp_default = float(tau_default)
                elif re.search(r"\(\s*1\s*\+.*\)\s*/\s*\(\s*10\s*\+", text):
                    summary.ramp = "num_updates"
                return

    def _expand(self, expr: cst.BaseExpression, init: cst.FunctionDef) -> dict[str, str]:
        """Names an update coefficient reads, through locals of its method and ``self.x``
        attributes set in ``__init__`` (``""`` maps to the code of everything followed)."""
        found: dict[str, str] = {}
        texts: list[str] = []
        frontier: list[tuple[cst.CSTNode, int]] = [(expr, 0)]
        cls = self.index.enclosing(init, cst.ClassDef)
        assigned = self.resolver.self_assignments(cls) if isinstance(cls, cst.ClassDef) else {}
        while frontier:
            node, depth = frontier.pop()
            if depth > 4:
                continue
            texts.append(self._code(node))
            for attr in [node, *self.index.descendants(node, cst.Attribute)]:
                if (
                    isinstance(attr, cst.Attribute)
                    and isinstance(attr.value, cst.Name)
                    and attr.value.value == "self"
                ):
                    for value in assigned.get(attr.attr.value, []):
                        if value is not None:
                            frontier.append((value, depth + 1))
            for name in [node, *self.index.descendants(node, cst.Name)]:
                if not isinstance(name, cst.Name):
                    continue
                bindings = self.resolver.bindings_of(name)
                for binding in bindings or ():
                    if binding.kind == "param" and binding.param is not None:
                        found.setdefault(binding.param.name.value, "")
                    elif binding.kind == "assign" and binding.value is not None:
                        frontier.append((binding.value, depth + 1))
        found[""] = " ".join(texts)
        return found

    def _buffers(
        self, cls: cst.ClassDef | cst.FunctionDef, updates: list[InPlaceUpdate], copies: list
    ) -> str:
        methods = {u.shadow_method for u in updates} | {u.source_method for u in updates}
        if "state_dict" in methods:
            return "yes"
        if self._calls_named(cls, "buffers", "named_buffers"):
            return "copied"
        return "no" if methods & {"parameters", "named_parameters"} else ""

    def _placement(self, summary: ClassSummary, init: cst.FunctionDef) -> None:
        params = {p.name.value for p in all_params(init)}
        for call in self._calls_named(init, "to", "cpu", "half", "eval", "type"):
            method = call.func.attr.value  # type: ignore[attr-defined]
            if method == "eval":
                summary.eval_on_init = True
            elif method == "cpu":
                summary.cpu = True
            elif method == "half":
                summary.half = True
            elif method == "to":
                for arg in call.args:
                    value = arg.value
                    if isinstance(value, cst.Name) and value.value in params:
                        keyword = arg.keyword.value if arg.keyword else ""
                        if "dtype" in value.value or keyword == "dtype":
                            summary.dtype = value.value
                        elif "device" in value.value or keyword == "device":
                            summary.device = value.value
                    elif _is_cpu(value):
                        summary.cpu = True
                    elif _code_of(value) in ("torch.float16", "torch.half"):
                        summary.half = True

    # Functions ---------------------------------------------------------------------------------
    def _updater(self, function: cst.FunctionDef) -> UpdaterSummary | None:
        params = [p.name.value for p in all_params(function)]
        if not params:
            return None
        for update in self.updates:
            if not self.index.contains(function, update.node):
                continue
            average = self._param_of(update.shadow_container or strip_tensor(update.shadow))
            live = self._param_of(update.source_container or update.source)
            if average is None or live is None or average == live:
                continue
            named = names_an_average(function.name.value) or any(
                is_averaged_name(n) for n in (average, *params)
            )
            elementwise = update.form == "returned"
            if elementwise and any(
                w in NOT_WEIGHT_TOKENS for n in (average, live) for w in tokens(n)
            ):
                continue  # ``smooth(loss_ema, loss, beta)``: a loss or metric average
            if not named or not (elementwise or self._reads_weights(update, average, live)):
                continue  # a helper averaging logged values (``ema_update_dict``)
            found = self._at(
                UpdaterSummary(function.name.value, 0, params, average, live), function
            )
            found.elementwise = elementwise
            found.buffers = self._buffers(function, [update], [])
            for coefficient, side in (
                (update.old_weight, "decay"),
                (update.new_weight, "momentum"),
            ):
                if coefficient is None:
                    continue
                expr, complement = _unwrap(coefficient.expr, coefficient.complement)
                if complement:
                    side = "momentum" if side == "decay" else "decay"
                rate = self._param_of(expr)
                ramp = None
                if rate is not None:
                    ramp = _warmup_of(function, rate)
                elif isinstance(expr, cst.Name) and expr.value in params:
                    # ``decay = min(decay, (1 + t) / (10 + t))`` rebinds the parameter.
                    ramp = _warmup_of(function, expr.value)
                    rate = expr.value if ramp is not None else None
                if rate is not None:
                    found.rate, found.side, found.ramp = rate, side, ramp
                    param = next(p for p in all_params(function) if p.name.value == rate)
                    default = self._literal(param.default)
                    if isinstance(default, (int, float)) and not isinstance(default, bool):
                        found.rate_default = float(default)
                    break
            return found
        return None

    @staticmethod
    def _reads_weights(update: InPlaceUpdate, average: str, live: str) -> bool:
        if {update.source_method, update.shadow_method} & set(WEIGHT_METHODS):
            return True
        words = {*tokens(average), *tokens(live)}
        return bool(words & {"param", "params", "parameters", "model", "weights", "net"})

    def _param_of(self, node: cst.BaseExpression | None, depth: int = 0) -> str | None:
        if node is None or depth > 8:  # ``x = f(x)`` binds ``x`` to itself
            return None
        node = container_of(strip_tensor(node))
        while (
            isinstance(node, cst.Call)
            and node.args
            and dotted_name(node.func)
            in (
                "zip",
                "list",
                "iter",
            )
        ):
            node = node.args[0].value
        if not isinstance(node, cst.Name):
            return None
        for binding in self.resolver.bindings_of(node) or ():
            if binding.kind == "param" and binding.param is not None:
                return binding.param.name.value
            if binding.kind == "assign" and binding.value is not None:
                return self._param_of(binding.value, depth + 1)
        return None

    def _stepper(
        self, function: cst.FunctionDef, name: str, is_class: bool
    ) -> StepperSummary | None:
        calls = [c for c in self.index.descendants(function, cst.Call) if isinstance(c, cst.Call)]
        backward = any(
            isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" for c in calls
        )
        step_calls = [
            c
            for c in calls
            if isinstance(c.func, cst.Attribute)
            and c.func.attr.value == "step"
            and self._steps_a_param(c)
        ]
        if not backward and not step_calls:
            return None
        if not step_calls and not is_class:
            return None  # a loss function calling backward is not a step helper
        params, kwonly, _ = _params(function, is_class)
        condition = None
        for call in step_calls:
            for ancestor in self.index.ancestors(call):
                if ancestor is function:
                    break
                if isinstance(ancestor, cst.If):
                    names = {
                        n.value
                        for n in [ancestor.test, *self.index.descendants(ancestor.test, cst.Name)]
                        if isinstance(n, cst.Name)
                    }
                    hit = [p for p in (*params, *kwonly) if p in names]
                    if hit:
                        condition = hit[0]
                        break
            if condition:
                break
        return self._at(
            StepperSummary(
                name,
                0,
                [*params, *kwonly],
                backward,
                bool(step_calls),
                condition,
                is_class,
            ),
            function,
        )

    def _steps_a_param(self, call: cst.Call) -> bool:
        func = call.func
        assert isinstance(func, cst.Attribute)
        candidates = [func.value, *(a.value for a in call.args[:1])]
        return any(
            self._param_of(c) is not None and "optim" in self._code(c).lower() for c in candidates
        )

    def _class_stepper(self, cls: cst.ClassDef) -> StepperSummary | None:
        call = self._methods(cls).get("__call__")
        if call is None:
            return None
        return self._stepper(call, cls.name.value, True)

    def _evaluator(self, function: cst.FunctionDef) -> EvaluatorSummary | None:
        if not _EVAL_NAMES.search(function.name.value) and not any(
            isinstance(c, cst.Call) and dotted_name(c.func) in _NO_GRAD
            for c in self.index.descendants(function, cst.Call)
        ):
            return None
        params = [p.name.value for p in all_params(function)]
        if not params:
            return None
        sites = self.ctx.get(EvaluationSites)
        modes = self.ctx.get(ModeTracker)
        unmoded = [p for p in params if sites.evaluates_param(function, p)]
        sets_mode = [p for p in params if modes.param_sets_mode(function, p) is not None]
        if not unmoded and not sets_mode:
            return None
        return self._at(
            EvaluatorSummary(function.name.value, 0, params, unmoded, sets_mode), function
        )

    def _recalibrators(self) -> list[RecalibratorSummary]:
        found: list[RecalibratorSummary] = []
        for name, (function, model_at, loader_at) in self.ctx.get(LocalBnUpdates).functions.items():
            if self.index.enclosing(function, cst.ClassDef, cst.FunctionDef) is not None:
                continue
            params = [p.name.value for p in function.params.params]
            loader = params[loader_at] if loader_at is not None else None
            record = RecalibratorSummary(name, 0, params, params[model_at], loader)
            found.append(self._at(record, function))
        return found

    # Calls out ---------------------------------------------------------------------------------
    def _calls(self) -> list[CallSummary]:
        found: list[CallSummary] = []
        if not self.objects.objects and not self.imports.aliases:
            return found
        for call in self.ctx.nodes(cst.Call):
            names = self.imports.qualified_names(call.func)
            if not names or names[0] in API_TABLE.by_name:
                continue
            callee = names[0]
            position = 0
            for arg in call.args:
                if arg.star:
                    break
                evidence = self._evidence(arg.value)
                if evidence is not None:
                    found.append(
                        self._at(
                            CallSummary(
                                callee,
                                0,
                                None if arg.keyword else position,
                                arg.keyword.value if arg.keyword else None,
                                evidence,
                            ),
                            call,
                        )
                    )
                if arg.keyword is None:
                    position += 1
        return found

    def _forwarded(self) -> list[ForwardedSummary]:
        """The weights of this module's averages that its callers elsewhere give."""
        found: list[ForwardedSummary] = []
        uses: dict[int, cst.CSTNode] = {}
        if not self.objects.objects:
            found = self._handed_on(uses)
            return found + self._inherited_forwarding(found, uses)
        for weight in self.ctx.get(DecaySettings).forwarded:
            spec = weight.spec
            if spec is HAND_MADE or spec.in_project:
                api = ""  # a project helper's weight: its side is all its callers need
            elif API_TABLE.get(spec.qualname) is spec and spec.weight is weight.weight:
                api = spec.qualname
            else:
                continue
            ramps = weight.weight.ramps
            ramp = -2 if weight.ramp_unknown else -1
            if weight.ramp is not None and weight.ramp in ramps:
                ramp = ramps.index(weight.ramp)
            if weight.config:
                owner = self.index.enclosing(weight.function, cst.ClassDef)
                name = owner.name.value if isinstance(owner, cst.ClassDef) else None
            else:
                name = called_as(self.index, weight.function)
            if name is None:
                continue
            record = ForwardedSummary(
                name,
                0,
                list(positional_names(weight.function)),
                weight.param,
                weight.attribute,
                api,
                weight.weight.side.value,
                weight.use.value,
                weight.interval,
                ramp,
                weight.used_by,
                not weight.config
                and name != weight.function.name.value
                and weight.function.name.value != "__init__",
                weight.elements,
            )
            record.config = weight.config
            found.append(self._at(record, weight.use_node))
            uses[id(record)] = weight.use_node
        found += self._handed_on(uses)
        return found + self._inherited_forwarding(found, uses)

    def _handed_on(self, uses: dict[int, cst.CSTNode]) -> list[ForwardedSummary]:
        """Values this module hands, unread, to a function it imports: ``update_ema(params,
        self.params, rate=rate)`` with ``rate`` an element of ``TrainLoop``'s ``ema_rate``.
        Whether the callee averages, and with which argument, is the calling module's to ask
        of the project (a summary never reads another module's)."""
        imports = self.ctx.get(ImportTable)
        bound = {id(b.call) for b in self.ctx.get(ApiCalls).calls}
        found: list[ForwardedSummary] = []
        dispatch = dispatch_table(self.ctx, imports)
        for call in self.ctx.nodes(cst.Call):
            if id(call) in bound or not call.args:
                continue
            names = [q for q in imports.qualified_names(call.func) if not q.startswith(".")]
            if not names and isinstance(call.func, cst.Name) and call.func.value in dispatch:
                # ``ema_fn = getattr(utils, config.get("which_ema", "tf1_ema"))``
                names = dispatch_candidates(dispatch[call.func.value], imports, self.resolver)
            if not names:
                continue
            callee = names[-1]
            averaging = averaged_identifier(callee.rpartition(".")[2])
            position = 0
            for arg in call.args:
                if arg.star:
                    break
                slot = arg.keyword.value if arg.keyword is not None else f"#{position}"
                if arg.keyword is None:
                    position += 1
                if not averaging and slot not in _WEIGHT_KEYWORDS:
                    continue
                config = self._config_read(arg.value, call)
                if config is not None:
                    record = ForwardedSummary(
                        config,
                        0,
                        [],
                        "config",
                        arg.value.attr.value,  # type: ignore[attr-defined]
                        "",
                        "",
                        "",
                        used_by=f"{callee.rpartition('.')[2]}()",
                        callee=callee,
                        slot=slot,
                        config=True,
                    )
                    found.append(self._at(record, call))
                    uses[id(record)] = call
                    continue
                hit = forwarding_parameter(self.resolver, self.index, arg.value)
                if hit is None:
                    continue
                function, param, attribute, elements = hit
                name = called_as(self.index, function)
                if name is None:
                    continue
                record = ForwardedSummary(
                    name,
                    0,
                    list(positional_names(function)),
                    param,
                    attribute,
                    "",
                    "",
                    "",
                    used_by=f"{callee.rpartition('.')[2]}()",
                    instance=name != function.name.value and function.name.value != "__init__",
                    elements=elements,
                    callee=callee,
                    slot=slot,
                )
                found.append(self._at(record, call))
                uses[id(record)] = call
        return found

    def _config_read(self, expr: cst.BaseExpression, call: cst.Call) -> str | None:
        """The class whose method hands ``self.config.<key>`` to ``call``, when the call
        averages something the module holds as weights (a leaf-wise helper applied by a
        tree map to an averaged tree): its subclasses' modules set the key."""
        found = self.resolver.config_key(expr)
        if found is None or not self.ctx.get(InPlaceUpdates).applied_to_weights(call):
            return None
        return found[0].name.value

    def _inherited_forwarding(
        self, found: list[ForwardedSummary], uses: dict[int, cst.CSTNode]
    ) -> list[ForwardedSummary]:
        """The records of a class's ``forward`` (or ``__init__``) for its subclasses of the
        module that keep it (``MoCo_ViT(MoCo)`` is called like ``MoCo``; ``CMTrainLoop(
        TrainLoop)`` whose ``__init__`` hands ``**kwargs`` to ``super().__init__``)."""
        if not found:
            return []
        classes = {
            c.name.value: c
            for c in self.ctx.nodes(cst.ClassDef)
            if self.index.enclosing(c, cst.ClassDef, cst.FunctionDef) is None
        }
        by_class: dict[tuple[str, bool], list[ForwardedSummary]] = {}
        for record in found:
            if record.name in classes:
                by_class.setdefault((record.name, record.instance), []).append(record)
        inherited: list[ForwardedSummary] = []
        for name, cls in classes.items():
            for instance in (True, False):
                current = cls
                kept: set[str] | None = None  # the keywords a ``**kwargs`` chain passes up
                for _ in range(MAX_BASES):
                    key = (current.name.value, instance)
                    if current is not cls and key in by_class:
                        for record in by_class[key]:
                            if kept is not None and record.param in kept:
                                continue
                            params = [] if kept is not None else record.params
                            copy = dataclasses.replace(record, name=name, params=params)
                            inherited.append(self._at(copy, uses[id(record)]))
                        break
                    methods = self._methods(current)
                    if (name, instance) in by_class:
                        break  # its own call
                    if instance and any(m in methods for m in CALL_METHODS):
                        break
                    if not instance and "__init__" in methods:
                        own = _passes_keywords_up(self.index, methods["__init__"])
                        if own is None:
                            break
                        kept = own | (kept or set())
                    bases = [b.value.value for b in current.bases if isinstance(b.value, cst.Name)]
                    local = [b for b in bases if b in classes]
                    if not local:
                        break
                    current = classes[local[0]]
        return inherited

    def _evidence(self, expr: cst.BaseExpression) -> str | None:
        obj = self.objects.for_expression(expr) if self.objects.objects else None
        if obj is not None:
            if obj.spec is not None:
                return f"api:{obj.spec.qualname}"
            return f"copy:{obj.name}"
        return self._constructor(expr, 0)

    def _constructor(self, expr: cst.BaseExpression, depth: int) -> str | None:
        if depth > 4:
            return None
        if isinstance(expr, cst.Call):
            names = self.imports.qualified_names(expr.func)
            if names:
                return f"ctor:{names[0]}"
            if isinstance(expr.func, cst.Attribute) and expr.func.attr.value in ("to", "cuda"):
                return self._constructor(expr.func.value, depth + 1)
            return None
        if isinstance(expr, cst.Name):
            bindings = self.resolver.bindings_of(expr) or []
            for binding in bindings:
                if binding.kind == "assign" and binding.value is not None:
                    found = self._constructor(binding.value, depth + 1)
                    if found is not None:
                        return found
        if isinstance(expr, cst.IfExp):
            return self._constructor(expr.body, depth + 1) or self._constructor(
                expr.orelse, depth + 1
            )
        return None


_MINIMUM = ("min", "minimum")  # ``min``, ``np.minimum``, ``jnp.minimum``, ``torch.minimum``


def _warmup_of(function: cst.FunctionDef, rate: str) -> str | None:
    """``rate = min(rate, (1 + t) / (10 + t))`` in ``function``: TF1's ``num_updates``
    warmup, which makes the rate a ceiling the average only approaches."""
    for node in _walk_statements(function.body):
        if not (
            isinstance(node, cst.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0].target, cst.Name)
            and node.targets[0].target.value == rate
            and isinstance(node.value, cst.Call)
            and (dotted_name(node.value.func) or "").rpartition(".")[2] in _MINIMUM
            and len(node.value.args) == 2
        ):
            continue
        args = [a.value for a in node.value.args]
        ramp = next((a for a in args if not (isinstance(a, cst.Name) and a.value == rate)), None)
        if ramp is not None and len(args) == 2 and _is_num_updates(ramp):
            return "num_updates"
    return None


def _walk_statements(body: cst.BaseSuite) -> Iterator[cst.CSTNode]:
    """The small statements of a function body, not those of nested definitions."""
    for statement in getattr(body, "body", ()):
        if isinstance(statement, cst.SimpleStatementLine):
            yield from statement.body
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(statement, cst.BaseCompoundStatement):
            yield from _walk_statements(statement.body)


def _is_num_updates(expr: cst.BaseExpression) -> bool:
    """``(1 + t) / (10 + t)`` (``1.0``, ``10.0``, either order of each sum)."""
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide)):
        return False

    def constant_plus(node: cst.BaseExpression, constant: float) -> str | None:
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add)):
            return None
        for number, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(number, (cst.Integer, cst.Float)) and float(number.value) == constant:
                return _code_of(other)
        return None

    top, bottom = constant_plus(expr.left, 1.0), constant_plus(expr.right, 10.0)
    return top is not None and top == bottom


def _unwrap(expr: cst.BaseExpression, complement: bool) -> tuple[cst.BaseExpression, bool]:
    """``1 - x`` (``1.0 - x``, in parentheses) as the complement of ``x``."""
    while (
        isinstance(expr, cst.BinaryOperation)
        and isinstance(expr.operator, cst.Subtract)
        and isinstance(expr.left, (cst.Integer, cst.Float))
        and float(expr.left.value) == 1.0
    ):
        expr, complement = expr.right, not complement
    return expr, complement


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (int, float, str, bool))


def _is_cpu(node: cst.BaseExpression) -> bool:
    text = _code_of(node).replace("'", '"')
    return text in ('"cpu"', 'torch.device("cpu")')


def _code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _declares_weight(record: ClassSummary) -> bool:
    """The class's ``__init__`` takes its weight: read from its update, or the weight of
    the table API it subclasses (mmyolo's ``ExpMomentumEMA(momentum=0.0002)`` passing it on
    to mmdet's)."""
    if record.weight is not None:
        return True
    base = API_TABLE.get(record.base) if record.base else None
    weight = base.weight if base is not None else None
    return weight is not None and weight.param in (*record.params, *record.kwonly)


def averaging_definitions(
    ctx: FileContext,
) -> list[tuple[ClassSummary | UpdaterSummary, cst.FunctionDef]]:
    """The module's own averaging classes and update functions whose weight is a parameter:
    each record with the function that declares it (``__init__`` for a class), so that a
    default is judged where it is written. Built from the same per-file analysis as the
    summary, on ``ctx`` itself (no second parse, no line pass)."""
    extractor = _Extractor(ctx)
    found: list[tuple[ClassSummary | UpdaterSummary, cst.FunctionDef]] = []
    for node in ctx.nodes(cst.ClassDef):
        if ctx.index.enclosing(node, cst.ClassDef, cst.FunctionDef) is not None:
            continue
        record = extractor._class(node)
        init = extractor._methods(node).get("__init__")
        if record is None and init is not None:
            record = extractor._library_source(node, init)
        if record is not None and init is not None and _declares_weight(record):
            found.append((record, init))
    for node in ctx.nodes(cst.FunctionDef):
        if ctx.index.enclosing(node, cst.ClassDef, cst.FunctionDef) is not None:
            continue
        updater = extractor._updater(node)
        if updater is not None and updater.rate is not None:
            found.append((updater, node))
    return found
