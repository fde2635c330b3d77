"""The project as one module sees it: its imports resolved, the summaries of what they name.

``ProjectLink`` is what ``FileContext.project`` holds for a file on disk. The analysis
layers below ask it three kinds of question, and never open a file themselves:

- ``absolute(module)``: the absolute name of a relative import (``.nn`` -> ``pkg.nn``),
  so a relative import of a table API matches the table entry;
- ``apis()``: the project's own averaging classes and update functions this module calls,
  as API specs (so every value, device, dtype and buffer rule judges them like the table);
- ``parameter(function, param)``: whether another module of the project passes an
  averaging object for this parameter; ``steps(call)`` / ``backpropagates(call)``: whether
  a call runs a project step helper;
- ``forwarded(call)``: the averaging weights the function a call runs takes from its
  arguments (``args.ema_rate`` read by an update in the engine's ``train_one_epoch``).

Cost is bounded: only modules this module imports (and, for callers, the project's files
whose bytes name one of its functions and its module) are summarised, each at most once per
content, and only when the definition looked up holds byte evidence of the kind of record
asked for (``kind_evidence``: an averaging class needs averaging names in its code, a step
helper ``.backward(``/``.step(``); a re-export is followed by bytes first), and a caller is
scanned for a step helper only when it names one of the project's possible step helpers;
imports are followed through re-exports to a fixed depth; the files and their hashes that
were read are kept in ``used``, so the results cache can tell when a helper changed.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial

import libcst as cst

from ema_lint import limits
from ema_lint.analysis.objects.apis import (
    API_SPECS,
    API_TABLE,
    PROJECT_LIBRARY,
    REQUIRED,
    ApiSpec,
    Ramp,
    RampKind,
    Role,
    Side,
    Weight,
)
from ema_lint.analysis.objects.averaging import Use, named_use, spec_use
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.parsing import parse_module
from ema_lint.analysis.syntax.values import ValueResolver, rewraps
from ema_lint.analysis.syntax.vocabulary import AVERAGE_COMPOUNDS, averaged_identifier
from ema_lint.analysis.training.decays import HAND_MADE, hand_weight
from ema_lint.analysis.training.forwarded import ForwardedCall
from ema_lint.prefilter import code_names, without_prose

from . import admission, resolution
from .admission import (
    TOP_DEFINITION,
    definition,
    definition_at,
    has_evidence,
    imports_of,
    reexports,
    top_definitions,
)
from .resolution import ModuleFile, module_stem, project_files
from .summaries import (
    AttributeSummary,
    ClassSummary,
    EvaluatorSummary,
    FactorySummary,
    ForwardedSummary,
    ForwardingGroup,
    ModuleSummary,
    RecalibratorSummary,
    StepperSummary,
    UpdaterSummary,
    averaging_definitions,
    evaluation_name,
    summarize,
)

MAX_REEXPORTS = 3
MAX_BASE_MODULES = 6  # modules a class's bases are followed through
MAX_FILE_BYTES = 2_000_000


# Summaries, once per content ------------------------------------------------------------------
class SummaryStore:
    """Summaries by content hash: in memory, and under a directory when one is set."""

    def __init__(self) -> None:
        self.memory: dict[str, ModuleSummary | None] = {}
        self.directory: str | None = None
        self.files: dict[str, tuple[tuple[int, int], str]] = {}

    def read(self, path: str) -> tuple[str, bytes] | None:
        """(hash, bytes) of a file, the hash remembered by its stat signature. The bytes
        are admission's (one copy of each file in memory, not one per layer; the files
        read last are held, others read again when asked)."""
        try:
            if os.stat(path).st_size > MAX_FILE_BYTES:
                return None
        except OSError:
            return None
        found = admission.read_signed(path)
        if found is None or found[1] is None:
            return None
        signature, data = found
        known = self.files.get(path)
        if known is not None and known[0] == signature:
            return known[1], data
        digest = hashlib.sha256(data).hexdigest()
        self.files[path] = (signature, digest)
        return digest, data

    def summary(self, me: ModuleFile) -> tuple[str, ModuleSummary | None] | None:
        """(content hash, summary) of a module of the project; None if it cannot be read."""
        path = me.path
        read = self.read(path)
        if read is None:
            return None
        digest, data = read
        key = digest
        if me.package:
            # Relative imports name table APIs through the package: part of the key.
            key += "-" + hashlib.sha256(me.package.encode()).hexdigest()[:8]
        if key in self.memory:
            return digest, self.memory[key]
        found = self._load_disk(key)
        if found is None:
            found = self._compute(data, path, me)
            self._save_disk(key, found)
        self.memory[key] = found
        return digest, found

    @staticmethod
    def _compute(data: bytes, path: str, me: ModuleFile) -> ModuleSummary | None:
        if not module_relevant(data):
            return ModuleSummary()  # nothing about averaging or steps: an empty summary
        if limits.check(data) is not None:
            return None
        try:
            module = parse_module(data)
            found = summarize(module, path, data, partial(resolution.absolute_name, me))
        except Exception:  # a module that does not parse or analyse tells nothing
            return None
        _remember_parse(data, module)
        return found

    def _disk_path(self, digest: str) -> str | None:
        if self.directory is None:
            return None
        return os.path.join(self.directory, digest[:2], digest[2:] + ".json")

    def _load_disk(self, digest: str) -> ModuleSummary | None:
        path = self._disk_path(digest)
        if path is None:
            return None
        try:
            with open(path, "rb") as handle:
                return ModuleSummary.from_json(json.loads(handle.read()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _save_disk(self, digest: str, summary: ModuleSummary | None) -> None:
        path = self._disk_path(digest)
        if path is None or summary is None:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(summary.to_json(), handle, separators=(",", ":"))
            os.replace(temporary, path)
        except OSError:
            self.directory = None


STORE = SummaryStore()

# Trees parsed for a summary, kept for a few files so that linting the same file later in
# the run does not parse it again (a summary itself never holds a tree).
_PARSED: dict[str, cst.Module] = {}
MAX_PARSED = 16
# A tree takes ~350 bytes of memory per byte of source: a 200 kB module's, 70 MB. Held
# for its file's turn, it would add that to the worker's peak for the rest of the run.
MAX_HELD_BYTES = 64 << 10


def _remember_parse(data: bytes, module: cst.Module) -> None:
    if len(data) > MAX_HELD_BYTES:
        return  # a large module's tree is not held between files
    while len(_PARSED) >= MAX_PARSED:
        del _PARSED[next(iter(_PARSED))]
    _PARSED[hashlib.sha256(data).hexdigest()] = module


def parsed(data: bytes | str) -> cst.Module | None:
    """The tree of ``data`` if a summary parsed these very bytes in this process."""
    if not _PARSED or not isinstance(data, bytes):
        return None
    return _PARSED.pop(hashlib.sha256(data).hexdigest(), None)


def use_directory(directory: str | None) -> None:
    """Keep summaries under ``directory`` too (the results cache's folder), or only in memory."""
    STORE.directory = directory


# The kinds of record a lookup wants, each with the evidence its definition must hold.
AVERAGING = "averaging"  # ClassSummary, UpdaterSummary, FactorySummary
STEP = "step"  # StepperSummary
EVALUATION = "evaluation"  # EvaluatorSummary
RECALIBRATION = "recalibration"  # RecalibratorSummary
FORWARDING = "forwarding"  # ForwardingGroup (asked for on its own: never in ALL_KINDS)
ALL_KINDS = frozenset({AVERAGING, STEP, EVALUATION, RECALIBRATION})
_AVERAGING, _STEP = frozenset({AVERAGING}), frozenset({STEP})
_EVALUATION, _RECALIBRATION = frozenset({EVALUATION}), frozenset({RECALIBRATION})
_FORWARDING = frozenset({FORWARDING})
_KIND_OF: dict[type, str] = {
    ClassSummary: AVERAGING,
    UpdaterSummary: AVERAGING,
    FactorySummary: AVERAGING,  # it returns a holder of an averaged copy
    StepperSummary: STEP,
    EvaluatorSummary: EVALUATION,
    RecalibratorSummary: RECALIBRATION,
    ForwardingGroup: FORWARDING,
}
_WORD = rb"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])"  # a whole identifier
_COMPOUNDS = tuple(c.encode() for c in AVERAGE_COMPOUNDS)
_API_NAMES = re.compile(
    rb"\b(?:"
    + b"|".join(
        re.escape(n.encode())
        for n in sorted(
            {s.short_name for s in API_SPECS if s.role in (Role.EMA_MODEL, Role.SWA_MODEL)}
            | {s.short_name for s in API_SPECS if s.role is Role.EMA_FUNCTION}
        )
    )
    + rb")\b"
)
_RECALIBRATION_WORDS = (b"running_mean", b"running_var", b"reset_running_stats", b"momentum")
_EVAL_WORDS = (b"no_grad", b"inference_mode")


def averaging_evidence(body: bytes) -> bool:
    """The bytes of a definition can make an averaging-class or update-helper record: an
    averaging word as an identifier component (admission's ``EVIDENCE``, not in comments
    and docstrings), a table API's name, a compound naming an
    average update (``momentum_update``), or an identifier of the code
    that the analysis takes for an averaged name (``encoder_k``, ``target_net``,
    ``avg_model``; comments and strings left out: ``global_pool='avg'`` names no average)."""
    if any(c in body for c in _COMPOUNDS):
        return True
    unprosed = without_prose(body)
    if has_evidence(unprosed) or _API_NAMES.search(unprosed) is not None:
        return True  # (a table API: a subclass or a wrapper, ``optax.incremental_update``)
    return any(averaged_identifier(m.decode("ascii")) for m in code_names(body, strings=False))


def kind_evidence(body: bytes, name: str, kind: str) -> bool:
    """The definition ``body`` of ``name`` can make a record of ``kind`` (by bytes: a
    superset of what the summary's extractor accepts)."""
    if kind in (AVERAGING, FORWARDING):
        return averaging_evidence(body)
    if kind == STEP:
        found = TOP_DEFINITION.search(body)
        return _could_step(body, found is not None and found.group(0).startswith(b"class"))
    if kind == EVALUATION:  # a function only
        found = TOP_DEFINITION.search(body)
        if found is None or found.group(0).startswith(b"class"):
            return False
        return evaluation_name(name) or any(w in body for w in _EVAL_WORDS)
    if kind == RECALIBRATION:
        return any(w in body for w in _RECALIBRATION_WORDS)
    return False


_OTHER_WORDS = (b".step(", b"backward", *_EVAL_WORDS, *_RECALIBRATION_WORDS)


def module_relevant(data: bytes) -> bool:
    """A module that can make any record: averaging evidence, or a step, backward,
    no-grad or BatchNorm-statistics word, or an import of an averaging module."""
    return (
        any(w in data for w in _OTHER_WORDS)
        or averaging_evidence(data)
        or admission.imports_averaging(data)
    )


def defines_relevant(data: bytes, name: str, kinds: frozenset[str] = ALL_KINDS) -> bool:
    """``data`` defines ``name`` at the top level with evidence, in the definition (its
    decorators included), of one of the ``kinds`` of record wanted, or imports ``name``
    (a re-export). A byte scan that saves summarising the modules a file imports for other
    things (a model class is no averaging class because its module says ``.step(``)."""
    body = definition(data, name)
    if body is None:
        return reexports(data, name)
    return any(kind_evidence(body, name, kind) for kind in kinds)


_RELEVANCE: dict[tuple[str, str, frozenset[str]], bool] = {}
MAX_RELEVANCE = 100_000


def _relevant(digest: str, data: bytes, name: str, kinds: frozenset[str]) -> bool:
    """``defines_relevant``, once per content, name and kinds in a process (every file of a
    package asks it of the same few definitions)."""
    key = (digest, name, kinds)
    found = _RELEVANCE.get(key)
    if found is None:
        if len(_RELEVANCE) >= MAX_RELEVANCE:
            _RELEVANCE.clear()
        found = _RELEVANCE[key] = defines_relevant(data, name, kinds)
    return found


def reexport_relevant(
    path: str, data: bytes, name: str, kinds: frozenset[str], depth: int = 0
) -> bool:
    """Whether ``name``, which the module at ``path`` imports rather than defines, may lead
    to a definition with evidence of ``kinds``: followed by bytes through the module's
    import lines (``from .vision_transformer import Attention`` in a package of models need
    not summarise the re-exporting module, often a large one). An import the byte reader
    cannot follow (``import X as name``, a line it does not parse) leaves it to the summary."""
    if depth > MAX_REEXPORTS:
        return False
    listed = False
    for imported in imports_of(path, data):
        if imported.names is None or name not in imported.names:
            continue  # (a module taken whole, ``from pkg import mod``: not this name)
        listed = True
        read = STORE.read(imported.path)
        if read is None:
            continue
        target = read[1]
        if definition(target, name) is not None:
            if _relevant(read[0], target, name, kinds):
                return True
        elif reexports(target, name) and reexport_relevant(
            imported.path, target, name, kinds, depth + 1
        ):
            return True
    return not listed


# Evidence for messages ------------------------------------------------------------------------
@dataclass(frozen=True)
class Evidence:
    """Where a fact about this module came from, in another file."""

    what: str  # "ModelEMA, defined in utils/ema.py"
    path: str
    line: int


def _display(path: str, base: str) -> str:
    try:
        relative = os.path.relpath(path, base)
    except ValueError:
        return path
    return relative.replace(os.sep, "/") if not relative.startswith("..") else path


@dataclass(frozen=True)
class InheritedAttribute:
    """An averaging object another module's class sets on ``self`` for this module's class
    (its base's ``__init__``, or a subclass's)."""

    attr: str
    kind: str  # the averaging Method's value
    spec: ApiSpec | None
    evidence: Evidence


# The link of one module --------------------------------------------------------------------------
class ProjectLink:
    """What one module of the project knows about the others."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.me = resolution.module_for_path(ctx.path)
        root = resolution.project_root(os.path.dirname(self.me.path))
        self.base = root or os.path.dirname(self.me.path)
        self.used: dict[str, str] = {}
        self.evidence: dict[str, Evidence] = {}
        self.notes: list[tuple[str, Evidence, cst.CSTNode | None]] = []
        self._apis: dict[str, ApiSpec] | None = None
        self._definitions: list[tuple[ApiSpec, cst.FunctionDef]] | None = None
        self._items: dict[tuple[str, str, frozenset[str]], tuple[ModuleFile, object] | None] = {}
        self._callers: (
            dict[tuple[str, frozenset[bytes] | None], list[tuple[ModuleFile, ModuleSummary]]] | None
        ) = None

    @classmethod
    def for_context(cls, ctx: FileContext) -> ProjectLink | None:
        if not ctx.path or not os.path.isfile(ctx.path):
            return None
        return cls(ctx)

    # Lower layers' questions -----------------------------------------------------------------
    def absolute(self, module: str) -> str | None:
        return resolution.absolute_name(self.me, module)

    def apis(self) -> dict[str, ApiSpec]:
        """Specs of the project classes and update functions this module calls, by the
        qualified names its imports give them."""
        if self._apis is None:
            self._apis = {}
            imports = self.ctx.get(ImportTable)
            seen: set[str] = set()
            for node in self.ctx.nodes(cst.Call):
                for qualname in imports.qualified_names(node.func):
                    if qualname in seen:
                        continue  # a table name the project defines itself: its own code wins
                    seen.add(qualname)
                    spec = self._spec(qualname)
                    if spec is not None:
                        self._apis[qualname] = spec
                        local = dotted_name(node.func)
                        if local and qualname in self.evidence:
                            self.note(local, self.evidence[qualname], None)
        return self._apis

    def spec_for(self, qualname: str) -> ApiSpec | None:
        """The spec of a project averaging class or update function, by qualified name."""
        apis = self.apis()
        if qualname not in apis:
            spec = self._spec(qualname)
            if spec is None:
                return None
            apis[qualname] = spec
        return apis[qualname]

    def definitions(self) -> list[tuple[ApiSpec, cst.FunctionDef]]:
        """This module's own averaging classes and update functions, as specs with the
        function declaring their weight, so that a default is judged where it is written."""
        if self._definitions is not None:
            return self._definitions
        where = _display(self.me.path, self.base)
        found: list[tuple[ApiSpec, cst.FunctionDef]] = []
        for record, function in averaging_definitions(self.ctx):
            if isinstance(record, ClassSummary):
                spec = class_spec(record, record.name, where)
            else:
                spec = updater_spec(record, record.name, where)
            if spec is not None and spec.weight is not None:
                found.append((spec, function))
        self._definitions = found
        return found

    def note(self, local: str, evidence: Evidence, scope: cst.CSTNode | None) -> None:
        """Findings on statements naming ``local`` (inside ``scope``) cite ``evidence``."""
        self.notes.append((local, evidence, scope))

    def parameter(
        self, function: cst.FunctionDef, param: cst.Param
    ) -> tuple[ApiSpec | None, Evidence] | None:
        """The averaging object another module passes for ``param`` of ``function``."""
        if self.ctx.index.enclosing(function, cst.ClassDef, cst.FunctionDef) is not None:
            return None
        name = function.name.value
        positional = [
            p.name.value for p in (*function.params.posonly_params, *function.params.params)
        ]
        for caller, summary in self._callers_of(name):
            for call in summary.calls:
                if not self._calls_me(caller, call.callee, name):
                    continue
                matched = (call.keyword == param.name.value) or (
                    call.keyword is None
                    and call.position is not None
                    and call.position < len(positional)
                    and positional[call.position] == param.name.value
                )
                if not matched:
                    continue
                found = self._evidence_object(caller, call.evidence)
                if found is None:
                    continue
                spec, what = found
                where = _display(caller.path, self.base)
                return spec, Evidence(
                    f"{what}, passed to {name}() in {where}:{call.line}", caller.path, call.line
                )
        return None

    def evaluator(self, call: cst.Call) -> EvaluatorSummary | None:
        """The project evaluation helper a call runs, if any."""
        imports = self.ctx.get(ImportTable)
        for qualname in imports.qualified_names(call.func):
            item = self._item(qualname, kinds=_EVALUATION)
            if item is not None and isinstance(item[1], EvaluatorSummary):
                module, record = item
                where = _display(module.path, self.base)
                local = dotted_name(call.func)
                if local:
                    self.note(
                        local,
                        Evidence(f"{record.name}, defined in {where}", module.path, record.line),
                        None,
                    )
                return record
        return None

    def recalibrator(self, call: cst.Call) -> RecalibratorSummary | None:
        """The project BatchNorm recalibration helper (its own ``update_bn``) a call runs."""
        imports = self.ctx.get(ImportTable)
        for qualname in imports.qualified_names(call.func):
            item = self._item(qualname, kinds=_RECALIBRATION)
            if item is not None and isinstance(item[1], RecalibratorSummary):
                module, record = item
                local = dotted_name(call.func)
                if local:
                    where = _display(module.path, self.base)
                    evidence = Evidence(
                        f"{record.name}, defined in {where}", module.path, record.line
                    )
                    self.note(local, evidence, None)
                return record
        return None

    def stepper(self, call: cst.Call) -> StepperSummary | None:
        """The project step helper a call runs, if any."""
        imports = self.ctx.get(ImportTable)
        for qualname in imports.qualified_names(call.func):
            item = self._item(qualname, kinds=_STEP)
            if item is not None and isinstance(item[1], StepperSummary) and not item[1].is_class:
                return item[1]
        func = call.func
        if isinstance(func, cst.Name):
            return self._stepper_instance(func)
        return None

    def forwarded(self, call: cst.Call) -> list[ForwardedCall]:
        """The averaging weights the project function ``call`` runs takes from its
        arguments, with where each is used."""
        imports = self.ctx.get(ImportTable)
        names = imports.qualified_names(call.func)
        instance = False
        if not names and isinstance(call.func, cst.Name) and len(call.args) > 1:
            # ``model(x1, x2, m)``: an instance of a project class, whose ``forward`` runs
            # (handed its input and the weight, at least two arguments).
            names, instance = self._constructors(call.func, 0, set()), True
        found: list[ForwardedCall] = []
        for qualname in names:
            item = self._item(qualname, kinds=_FORWARDING)
            if item is None or not isinstance(item[1], ForwardingGroup):
                continue
            module, group = item
            where = _display(module.path, self.base)
            for record in group.weights:
                if record.instance is not instance or record.config:
                    continue  # ``MoCo(...)`` makes one; ``model(...)`` runs its forward
                if record.callee:
                    forwarded = self._handed_on(record, where)
                else:
                    forwarded = _forwarded_call(record, where)
                if forwarded is not None and forwarded not in found:
                    found.append(forwarded)
        return found

    def config_weights(self, qualname: str) -> list[ForwardedCall]:
        """The averaging weights that methods of the project class ``qualname`` read as
        ``self.config.<key>``: a subclass's module sets them in its ``get_config()``."""
        item = self._item(qualname, kinds=_FORWARDING)
        if item is None or not isinstance(item[1], ForwardingGroup):
            return []
        module, group = item
        where = _display(module.path, self.base)
        found: list[ForwardedCall] = []
        for record in group.weights:
            if not record.config:
                continue
            if record.callee:
                forwarded = self._handed_on(record, where)
            else:
                forwarded = _forwarded_call(record, where)
            if forwarded is not None and forwarded not in found:
                found.append(forwarded)
        return found

    def _handed_on(self, record: ForwardedSummary, where: str) -> ForwardedCall | None:
        """A value another module hands on to a function it imports: a weight when that
        function is an averaging API of the table or the project taking its weight in the
        argument the value is passed as."""
        spec = self.spec_for(record.callee)
        if spec is None or spec.weight is None:
            return None
        weight = spec.weight
        if record.slot.startswith("#"):
            if spec.position_of(weight.param) != int(record.slot[1:]):
                return None
        elif record.slot != weight.param:
            return None
        use = named_use(spec_use(spec), f"{record.callee} {record.param} {weight.param}")
        ramp = weight.ramps[0] if len(weight.ramps) == 1 else None
        return _call_of(record, where, spec, weight, use, 1, ramp, len(weight.ramps) > 1)

    def _constructors(self, name: cst.Name, depth: int, seen: set[tuple[int, str]]) -> list[str]:
        """Qualified names of the calls that may have made the object ``name`` holds: its
        assignments (``model = moco.builder.MoCo_ViT(...)``; a rebinding through a call that
        takes it, ``model = DDP(model)`` or ``model = model.cuda()``, keeps the object), and
        for a parameter what the module's callers pass for it."""
        if depth > MAX_REEXPORTS:
            return []
        resolver = self.ctx.get(ValueResolver)
        imports = self.ctx.get(ImportTable)
        found: list[str] = []
        for binding in resolver.bindings_of(name) or ():
            value = binding.value
            if binding.kind == "assign" and isinstance(value, cst.Call):
                if rewraps(value, name.value):
                    continue  # the same object, wrapped or moved
                found.extend(q for q in imports.qualified_names(value.func) if q not in found)
            elif binding.kind == "param" and isinstance(binding.function, cst.FunctionDef):
                key = (id(binding.function), name.value)
                if binding.param is None or key in seen:
                    continue
                seen.add(key)
                for _, argument in resolver.arguments_for(binding.function, binding.param):
                    if isinstance(argument, cst.Name):
                        more = self._constructors(argument, depth + 1, seen)
                        found.extend(q for q in more if q not in found)
        return found

    # Lookups ------------------------------------------------------------------------------------
    def _summary(self, module: ModuleFile) -> ModuleSummary | None:
        found = STORE.summary(module)
        if found is None:
            return None
        digest, summary = found
        self.used[module.path] = digest
        return summary

    def _item(
        self,
        qualname: str,
        importer: ModuleFile | None = None,
        depth: int = 0,
        kinds: frozenset[str] = ALL_KINDS,
    ):
        """(module, summary record) of a qualified name of a project definition, when the
        record is of one of ``kinds`` (a module whose definition of the name holds no
        evidence of them is not summarised)."""
        key = (importer.path if importer else "", qualname, kinds)
        if key in self._items:
            return self._items[key]
        self._items[key] = None
        found = self._lookup(qualname, importer or self.me, depth, kinds)
        if found is not None and _KIND_OF.get(type(found[1])) not in kinds:
            found = None
        self._items[key] = found
        return found

    def _lookup(self, qualname: str, importer: ModuleFile, depth: int, kinds: frozenset[str]):
        if depth > MAX_REEXPORTS:
            return None
        module_name, _, name = qualname.rpartition(".")
        if not name or (not module_name and not qualname.startswith(".")):
            return None
        if qualname.startswith(".") and not module_name.strip("."):
            module_name = module_name or "."
        module = resolution.resolve(importer, module_name)
        if module is None:
            return self._through_module_attribute(module_name, name, importer, depth)
        read = STORE.read(module.path)
        if read is None or not _relevant(read[0], read[1], name, kinds):
            return None  # the module does not define ``name`` with anything about averaging
        if definition(read[1], name) is None and not reexport_relevant(
            module.path, read[1], name, kinds, depth
        ):
            return None  # a re-export of a definition that holds no such evidence
        summary = self._summary(module)
        if summary is None:
            return None
        item = summary.forwarding(name) if kinds == _FORWARDING else summary.find(name)
        if item is not None:
            return module, item
        for target in summary.exports.get(name, []):
            found = self._item(target, module, depth + 1, kinds)
            if found is not None:
                return found
        return None

    def _through_module_attribute(
        self, module_name: str, name: str, importer: ModuleFile, depth: int
    ):
        """``pkg.mod.sub.Name`` where ``pkg.mod`` is a module, not a package: ``sub`` is a
        name ``pkg.mod`` imports (``from . import torch_utils``), as a star import of
        ``pkg.mod`` hands it on. When ``pkg.mod`` itself is not in the project (a partial
        checkout) but ``pkg`` has a module ``sub``, that module is the only one the name
        can stand for and is read instead."""
        parent, _, attr = module_name.rpartition(".")
        if not parent or not attr:
            return None
        holder = resolution.resolve(importer, parent)
        if holder is not None:
            read = STORE.read(holder.path)
            if read is None or not reexports(read[1], attr):
                return None  # ``pkg.mod`` imports no ``sub``: nothing to summarise it for
            summary = self._summary(holder)
            for target in summary.exports.get(attr, []) if summary is not None else []:
                found = self._item(f"{target}.{name}", holder, depth + 1)
                if found is not None:
                    return found
            return None
        package = parent.rpartition(".")[0]
        if not package:
            return None
        return self._item(f"{package}.{attr}.{name}", importer, depth + 1)

    def _spec(self, qualname: str) -> ApiSpec | None:
        absolute = self.absolute(qualname.rpartition(".")[0]) if qualname.startswith(".") else None
        if absolute is not None:
            table = API_TABLE.get(f"{absolute}.{qualname.rpartition('.')[2]}")
            if table is not None:
                return table
        item = self._item(qualname, kinds=_AVERAGING)
        if item is None:
            return None
        module, record = item
        where = _display(module.path, self.base)
        if isinstance(record, ClassSummary):
            spec = class_spec(record, qualname, where)
        elif isinstance(record, FactorySummary):
            spec = self._factory_spec(module, record, qualname, where)
        elif isinstance(record, UpdaterSummary):
            spec = updater_spec(record, qualname, where)
        else:
            return None
        if spec is not None:
            self.evidence[qualname] = Evidence(
                f"{record.name}, defined in {where}", module.path, record.line
            )
        return spec

    def _factory_spec(
        self, module: ModuleFile, record: FactorySummary, qualname: str, where: str
    ) -> ApiSpec | None:
        """A function returning an instance of a project averaging class: its call makes
        one, with the function's own parameters (the class's weight is set inside)."""
        summary = self._summary(module)
        made = summary.find(record.cls) if summary is not None else None
        if not isinstance(made, ClassSummary):
            return None
        spec = class_spec(made, qualname, where)
        if spec is None:
            return None
        return replace(
            spec,
            params=tuple(record.params),
            kwonly=(),
            var_kwargs=False,
            defaults={p: REQUIRED for p in record.params},
            weight=None,
            device=None,
            dtype=None,
            model_copy=None,
        )

    def _evidence_object(
        self, caller: ModuleFile, evidence: str
    ) -> tuple[ApiSpec | None, str] | None:
        kind, _, value = evidence.partition(":")
        if kind == "api":
            spec = API_TABLE.get(value)
            return (spec, spec.short_name) if spec is not None else None
        if kind == "copy":
            return None, f"the averaged copy {value}"
        if kind == "ctor":
            item = self._item(value, caller, kinds=_AVERAGING)
            if item is not None and isinstance(item[1], ClassSummary):
                module, record = item
                where = _display(module.path, self.base)
                return class_spec(record, value, where), f"{record.name}, defined in {where}"
        return None

    def _stepper_instance(self, name: cst.Name) -> StepperSummary | None:
        resolver = self.ctx.get(ValueResolver)
        imports = self.ctx.get(ImportTable)
        for binding in resolver.bindings_of(name) or ():
            if binding.kind == "assign" and isinstance(binding.value, cst.Call):
                for qualname in imports.qualified_names(binding.value.func):
                    item = self._item(qualname, kinds=_STEP)
                    if item is not None and isinstance(item[1], StepperSummary):
                        return item[1]
            if binding.kind == "param" and isinstance(binding.function, cst.FunctionDef):
                found = self._stepper_argument(binding.function, binding.param)
                if found is not None:
                    return found
        return None

    def _stepper_argument(self, function: cst.FunctionDef, param) -> StepperSummary | None:
        # Only a caller that constructs one of the project's step helpers can pass one: a
        # caller whose bytes name none of them is never summarised (``model_cls(...)`` in a
        # model builder called from every model file asks this of each of them).
        helpers = step_helper_names(self.base)
        if not helpers:
            return None
        name = function.name.value
        positional = [
            p.name.value for p in (*function.params.posonly_params, *function.params.params)
        ]
        for caller, summary in self._callers_of(name, helpers):
            for call in summary.calls:
                if not self._calls_me(caller, call.callee, name):
                    continue
                if call.keyword != param.name.value and not (
                    call.keyword is None
                    and call.position is not None
                    and call.position < len(positional)
                    and positional[call.position] == param.name.value
                ):
                    continue
                kind, _, value = call.evidence.partition(":")
                if kind == "ctor":
                    item = self._item(value, caller, kinds=_STEP)
                    if item is not None and isinstance(item[1], StepperSummary):
                        return item[1]
        return None

    # Callers in other modules --------------------------------------------------------------------
    def _calls_me(self, caller: ModuleFile, callee: str, function: str) -> bool:
        module_name, _, name = callee.rpartition(".")
        if name != function or not module_name:
            return False
        target = resolution.resolve(caller, module_name)
        return target is not None and os.path.samefile(target.path, self.me.path)

    def _callers_of(
        self, function: str, naming: frozenset[bytes] | None = None
    ) -> list[tuple[ModuleFile, ModuleSummary]]:
        """Modules of the project that may call ``function`` of this module (and, when
        ``naming`` is given, whose bytes hold one of those names), with their summaries."""
        if self._callers is None:
            self._callers = {}
        key = (function, naming)
        found = self._callers.get(key)
        if found is None:
            found = self._callers[key] = list(self._scan_callers(function, naming))
        return found

    def _importers(self, function: str) -> Iterator[tuple[str, bytes]]:
        """Project files other than this one whose bytes could import ``function`` from this
        module: they hold the function's name and this module's (its package's for
        ``__init__``). A byte test, so no file is parsed to answer it."""
        # A file that starts importing this module later changes the answer: the results
        # cache keeps the lint only while no file changed since spells the module's name.
        self.used.setdefault(admission.importers_key(self.me.path), "")
        stem = module_stem(self.me.path)
        needle, word = stem.encode(), function.encode()
        # As whole identifiers: a module ``lamb`` is not named by every ``lambda``.
        spelled = re.compile(_WORD % re.escape(needle))
        called = re.compile(_WORD % re.escape(word))
        for path in project_files(self.base):
            if path == self.me.path:
                continue
            read = STORE.read(path)
            if read is None or word not in read[1] or needle not in read[1]:
                continue
            if called.search(read[1]) is None or spelled.search(read[1]) is None:
                continue
            # Both in the code, not in a comment or a docstring only (``# Copied from
            # pkg.module.function`` above a copy imports nothing): such a file would be
            # summarised, often a large one, to find that it calls nothing of this module.
            code = admission.code_of(path, read[1])
            if called.search(code) is not None and spelled.search(code) is not None:
                yield path, read[1]

    def inherited_attributes(self, qualname: str) -> list[InheritedAttribute]:
        """The averaging objects that the project class ``qualname``, a base of a class of
        this module, sets on ``self`` (``self.ema = EMA(net)`` in its ``__init__``)."""
        module_name, _, name = qualname.rpartition(".")
        if not name or not module_name:
            return []
        for _ in range(MAX_REEXPORTS):
            module = resolution.resolve(self.me, module_name)
            if module is None:
                return []
            summary = self._summary(module)
            if summary is None:
                return []
            records = [r for r in summary.attributes if r.cls == name]
            if records:
                return self._attributes_of(module, records, "its base class")
            targets = summary.exports.get(name, [])
            if not targets:
                return []
            module_name, _, name = targets[0].rpartition(".")
        return []

    def derives_from(self, qualname: str, bases: tuple[str, ...], depth: int = 0) -> str | None:
        """The name in ``bases`` (``LightningModule``) that the project class ``qualname``
        derives from, through project classes in any module; None when it does not."""
        if depth > MAX_BASE_MODULES:
            return None
        module_name, _, name = qualname.rpartition(".")
        if not name or not module_name:
            return None
        module = resolution.resolve(self.me, module_name)
        if module is None:
            return None
        summary = self._summary(module)
        if summary is None:
            return None
        written = summary.bases.get(name)
        if written is None:
            targets = summary.exports.get(name, [])
            return self.derives_from(targets[0], bases, depth + 1) if targets else None
        for base in written:
            last = base.rsplit(".", 1)[-1]
            if last in bases:
                return last
            if "." not in base:
                if not module.name:
                    continue
                base = f"{module.name}.{base}"  # a class of the same module
            found = self.derives_from(base, bases, depth + 1)
            if found is not None:
                return found
        return None

    def subclass_attributes(self, class_name: str, attrs: list[str]) -> list[InheritedAttribute]:
        """The averaging objects that classes of other modules deriving from this module's
        ``class_name`` set on ``self`` as one of ``attrs``: what its own methods (a base
        class's hooks) update. Only importers whose bytes assign one of them are read."""
        found: list[InheritedAttribute] = []
        assigned = re.compile(
            rb"self\.(?:%s)\s*=(?!=)" % b"|".join(re.escape(a.encode()) for a in attrs)
        )
        for path, data in self._importers(class_name):
            if assigned.search(data) is None:
                continue
            module = resolution.module_for_path(path)
            summary = self._summary(module)
            if summary is None:
                continue
            records = [
                r
                for r in summary.attributes
                if any(self._calls_me(module, base, class_name) for base in r.bases)
            ]
            found.extend(self._attributes_of(module, records, "its subclass"))
        return found

    def _attributes_of(
        self, module: ModuleFile, records: list[AttributeSummary], how: str
    ) -> list[InheritedAttribute]:
        where = _display(module.path, self.base)
        found: list[InheritedAttribute] = []
        for record in records:
            known = self._evidence_object(module, record.evidence)
            spec, what = known if known is not None else (None, f"self.{record.attr}")
            evidence = Evidence(
                f"{what} set as self.{record.attr} by {how} {record.cls} in {where}:{record.line}",
                module.path,
                record.line,
            )
            found.append(InheritedAttribute(record.attr, record.kind, spec, evidence))
        return found

    def setting_in_importers(self, names: list[str], keyword: str) -> tuple[int, Evidence] | None:
        """A literal ``keyword=N`` (or ``"keyword": N``) with N above 1 in a module of the
        project that imports one of ``names`` from this module: a LightningModule's
        ``accumulate_grad_batches`` is set where its Trainer is made, usually in the script
        that imports it. A byte test on the importers, so nothing is parsed."""
        pattern = re.compile(
            rb"(?<![A-Za-z0-9_])%s['\"]?\s*[=:]\s*(\d+)(?![\d.])" % re.escape(keyword.encode())
        )
        for name in names:
            for path, data in self._importers(name):
                read = STORE.read(path)
                if read is not None:
                    self.used[path] = read[0]  # a change of the setting re-lints this file
                for match in pattern.finditer(data):
                    count = int(match.group(1))
                    start = data.rfind(b"\n", 0, match.start()) + 1
                    if count <= 1 or b"#" in data[start : match.start()]:
                        continue  # not accumulating, or a comment
                    line = data.count(b"\n", 0, match.start()) + 1
                    where = _display(path, self.base)
                    return count, Evidence(f"{keyword}={count} in {where}:{line}", path, line)
        return None

    def mentioned_elsewhere(self, function: str) -> bool:
        """Another module of the project may call ``function`` of this module. False means
        that no module of the project can reach it but through a name no file spells: a
        public library API, whose every user gets its defaults."""
        return next(self._importers(function), None) is not None

    def _scan_callers(
        self, function: str, naming: frozenset[bytes] | None
    ) -> Iterator[tuple[ModuleFile, ModuleSummary]]:
        for path, data in self._importers(function):
            if naming is not None and not any(n in data for n in naming):
                continue
            module = resolution.module_for_path(path)
            summary = self._summary(module)
            if summary is not None and summary.calls:
                yield module, summary


def _forwarded_call(record: ForwardedSummary, where: str) -> ForwardedCall | None:
    """A forwarded weight of a summary, with its spec rebuilt from the table."""
    if record.api:
        spec = API_TABLE.get(record.api)
        if spec is None or spec.weight is None:
            return None
        weight = spec.weight
    else:
        spec, weight = HAND_MADE, hand_weight(Side(record.side))
    ramp = weight.ramps[record.ramp] if 0 <= record.ramp < len(weight.ramps) else None
    try:
        use = Use(record.use)
    except ValueError:
        return None
    return _call_of(
        record, where, spec, weight, use, max(1, record.interval), ramp, record.ramp == -2
    )


def _call_of(
    record: ForwardedSummary,
    where: str,
    spec: ApiSpec,
    weight: Weight,
    use: Use,
    interval: int,
    ramp: Ramp | None,
    ramp_unknown: bool,
) -> ForwardedCall:
    """The forwarded call a summary's record describes, with the average's semantics."""
    return ForwardedCall(
        tuple(record.params),
        record.param,
        record.attribute,
        spec,
        weight,
        use,
        interval,
        ramp,
        ramp_unknown,
        f"{record.used_by} in {where}:{record.line}",
        record.elements,
    )


def _could_step(body: bytes, is_class: bool) -> bool:
    """What a step-helper record needs, by bytes: a function steps an optimizer argument
    (``.step(`` on something named ``optim...``); a class does that or runs ``backward``
    in its ``__call__``."""
    steps = b".step(" in body and b"optim" in body
    if not is_class:
        return steps
    return b"__call__" in body and (steps or b".backward(" in body)


_STEP_HELPERS: dict[str, frozenset[bytes]] = {}
_STEP_NAMES: dict[str, frozenset[bytes]] = {}  # by file, for an update of one file


def _step_names(path: str) -> frozenset[bytes]:
    read = STORE.read(path)
    if read is None:
        return frozenset()
    data = read[1]
    if b".step(" not in data and b".backward(" not in data:
        return frozenset()
    names: set[bytes] = set()
    for at, name, is_class in top_definitions(data):
        if name in names:
            continue
        # Each name once, at its definition's own offset (``definition(data, name)``
        # would search the file from its start again for every name).
        if _could_step(definition_at(data, at), is_class):
            names.add(name)
    return frozenset(names)


def step_helper_names(base: str) -> frozenset[bytes]:
    """Names of the project's top-level classes and functions whose definition could be a
    step helper (``_could_step``): the only ones a step-helper record can be made for, so
    the only constructors a caller can pass a step helper with."""
    found = _STEP_HELPERS.get(base)
    if found is not None:
        return found
    names: set[bytes] = set()
    for path in project_files(base):
        mine = _STEP_NAMES[path] = _step_names(path)
        names.update(mine)
    found = _STEP_HELPERS[base] = frozenset(names)
    return found


@dataclass(frozen=True)
class Change:
    """What a long-lived process learnt of one file when told it changed."""

    path: str
    words: frozenset[bytes]  # its import lines' words, before and after
    listed: bool  # created or removed: the project's listing changed


_SEEN: dict[str, tuple[int, int, int] | None] = {}


def file_changed(path: str) -> Change | None:
    """Bring what this process knows of the project up to date with one file as it is on
    disk (written, created or removed): the listings, name lookups, the import index and
    the step helpers' names are updated for it alone, no scan of the project (the language
    server calls it on each save). None: the file is as it was when last told."""
    path = os.path.abspath(path)
    try:
        st = os.stat(path)
        signature: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    except OSError:
        signature = None
    exists = signature is not None and path.endswith(".py") and os.path.isfile(path)
    listed = False
    for found in resolution.listings_holding(path):
        if exists and path not in found:
            bisect.insort(found, path)  # near where a walk of the folder lists it
            listed = True
        elif not exists and path in found:
            found.remove(path)
            listed = True
    if listed:
        resolution.clear_lookups()  # a module appeared or went: names resolve anew
    if not listed and path in _SEEN and _SEEN[path] == signature:
        return None
    _SEEN[path] = signature
    words = admission.file_changed(path)
    bases = [b for b in _STEP_HELPERS if resolution.lists(b, path)]
    after = _step_names(path) if bases and exists else frozenset()
    if bases and after != _STEP_NAMES.get(path, frozenset()):
        _STEP_NAMES[path] = after
        for base in bases:
            _STEP_HELPERS[base] = frozenset().union(
                *(_STEP_NAMES.get(p, frozenset()) for p in project_files(base))
            )
    return Change(path, words, listed)


def linked(change: Change, other: str) -> bool:
    """The file ``other`` may import the changed file, or be imported by it (before or
    after the change): its findings may depend on the change (a byte test)."""
    return admission.linked(change.path, change.words, other)


def forget() -> None:
    """Forget listings and file reads (the files may have changed)."""
    _STEP_HELPERS.clear()
    _STEP_NAMES.clear()
    _SEEN.clear()
    STORE.files.clear()
    resolution.clear()
    admission.forget()


# Specs from summaries --------------------------------------------------------------------------
def class_spec(record: ClassSummary, qualname: str, where: str) -> ApiSpec | None:
    """A project averaging class as an API spec, so the rules judge its calls like the table's."""
    base = API_TABLE.get(record.base) if record.base else None
    weight: Weight | None = None
    if record.weight is not None and record.side is not None:
        ramps: tuple[Ramp, ...] = ()
        if record.ramp == "exp_tau":
            ramps = (
                Ramp(
                    RampKind.EXP_TAU, gamma=(record.ramp_param or "", record.ramp_default or 2000.0)
                ),
            )
        elif record.ramp == "num_updates":
            ramps = (Ramp(RampKind.NUM_UPDATES),)
        weight = Weight(record.weight, Side(record.side), record.weight_default, ramps=ramps)
    elif base is not None:
        weight = base.weight
    defaults = {k: (REQUIRED if v == REQUIRED else v) for k, v in record.defaults.items()}
    buffers = record.buffers or (base.buffers if base is not None else "")
    fields = dict(
        role=Role.SWA_MODEL if record.kind == "swa" and base is None else Role.EMA_MODEL,
        params=tuple(record.params),
        kwonly=tuple(record.kwonly),
        var_kwargs=record.var_kwargs,
        defaults=defaults,
        weight=weight,
        device=record.device,
        dtype=record.dtype,
        buffers=buffers,
        eval_on_init=record.eval_on_init,
        cpu_on_init=record.cpu and record.device is None,
        model_copy=record.model_copy,
        is_module=False,
        accepts_wrapped=record.unwraps,
        update_methods=tuple(record.update_methods) or ("update",),
        apply_methods=tuple(record.apply_methods),
        store_methods=tuple(record.store_methods),
        restore_methods=tuple(record.restore_methods),
        aliases=(),
        registry_names=(),
        library=f"{PROJECT_LIBRARY}{where}",
        docs="",
    )
    if record.copy_getter is not None:
        fields.update(
            copy_getter=record.copy_getter,
            getter_pairs=record.getter_pairs,
            source=record.source,
            copies_source=True,
        )
    if base is not None:
        if not record.params:
            fields.pop("params")
            fields.pop("kwonly")
            fields.pop("defaults")
            fields.pop("var_kwargs")
        # A subclass that defines none of them keeps its base's methods (AveragedModel's
        # ``update_parameters``), its device and its dtype.
        for method in ("update_methods", "apply_methods", "store_methods", "restore_methods"):
            if not getattr(record, method):
                fields.pop(method)
        for inherited in ("device", "dtype"):
            if fields[inherited] is None:
                fields.pop(inherited)
        return replace(base, qualname=qualname, **{k: v for k, v in fields.items() if k != "role"})
    if record.kind == "swa":
        return None  # a hand-made equal average: the SWA rules need AveragedModel's semantics
    return ApiSpec(qualname, **fields)  # type: ignore[arg-type]


def updater_spec(record: UpdaterSummary, qualname: str, where: str) -> ApiSpec | None:
    if record.rate is None or record.side is None:
        return None
    defaults: dict[str, object] = {p: REQUIRED for p in record.params}
    if record.rate_default is not None:
        defaults[record.rate] = record.rate_default
    return ApiSpec(
        qualname,
        Role.EMA_FUNCTION,
        params=tuple(record.params),
        defaults=defaults,
        weight=Weight(
            record.rate,
            Side(record.side),
            record.rate_default,
            ramps=(Ramp(RampKind(record.ramp)),) if record.ramp else (),
        ),
        source=record.live,
        shadow=record.average,
        buffers=record.buffers,
        library=f"{PROJECT_LIBRARY}{where}",
        elementwise=record.elementwise,
    )
