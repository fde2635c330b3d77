"""YAML training configs: API objects translated to Python, judged by the same rules.

A Lightning CLI object (``class_path`` + ``init_args``) or a Hydra/OmegaConf one
(``_target_`` + arguments) naming an API of the table is translated into a small Python
module that calls that API with the same arguments, one per line::

    from timm.utils import ModelEmaV3
    _ = ModelEmaV3(
        decay=0.99,
        **_from_code,
    )

The engine lints it with every enabled rule, unchanged; each finding's position maps back
to the YAML value (or key, or the object's ``class_path``/``_target_``) it came from, and
each fix that replaces a literal maps back to an edit of that YAML scalar, made in the text
so that comments and layout are kept, then checked by loading the result again. The
trailing ``**_from_code`` says what is true of a config: code may pass more arguments
(``instantiate(cfg.ema, model=model)``), so an absent argument is unknown, not a default.

A file that is one object (a Hydra config-group file: ``_target_`` at the top level) is a
call too. Nested objects become nested calls; Lightning's top-level ``trainer`` section becomes a
``Trainer(...)`` call in a Lightning CLI file (its callbacks included); OmegaConf
interpolations (``${model.ema_decay}``) become module constants, so a finding through one
names it and its fix edits the value where it is written.

Well-known keys (``ema_decay: 0.99``) are judged only where their meaning is clear: see
``WELL_KNOWN``. The files are read by ``yaml_nodes`` (PyYAML's composer: exact positions,
nothing constructed, aliases and merge keys resolved once and bounded); a file it refuses
is one EMA901 finding and the run goes on.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import libcst as cst

from .. import engine, registry
from ..analysis.objects.apis import API_TABLE, ApiSpec
from ..decoding import text_for_matching
from ..diagnostics import Diagnostic, EditKind, Fix, Position, TextEdit
from ..engine import FileSettings
from ..noqa import NoqaFilter, file_is_suppressed
from ..positions import LineIndex
from .base import SourceOutcome
from .yaml_nodes import Span, YamlError, YamlMap, load

TRIGGERS = (
    b"class_path",
    b"_target_",
    b"ema_decay",
    b"ema_rate",
    b"ema_momentum",
    b"swa_start",
    b"swa_epoch_start",
)
MAX_FIX_PASSES = 10
_STAR = "_from_code"
_INDENT = "    "


@dataclass(frozen=True)
class WellKnownKey:
    """A config key whose meaning is clear enough to judge it as an API's argument."""

    key: str
    api: str  # the qualified name whose parameter gives the key its meaning
    param: str
    ints_only: bool = False
    requires_sibling: str | None = None  # a key that must sit in the same mapping


# Precision first. Each key is judged as the argument of the API whose semantics it has by
# convention, only when its value is a number (or an interpolation of one), it does not sit
# among an object's arguments (there the object's API decides its meaning), and nothing
# around it says teacher/self-distillation (whose EMAs are not evaluation EMAs: a DINO
# teacher at 0.996 is right). ``ema_momentum`` is Keras' optimizer argument (weight on the
# old average) only next to ``use_ema``; elsewhere the word means either side. A key whose
# API the table does not know yet is not judged.
WELL_KNOWN: tuple[WellKnownKey, ...] = (
    WellKnownKey("ema_decay", "torch.optim.swa_utils.get_ema_multi_avg_fn", "decay"),
    WellKnownKey("ema_rate", "torch.optim.swa_utils.get_ema_multi_avg_fn", "decay"),
    WellKnownKey("model_ema_decay", "timm.utils.ModelEmaV3", "decay"),
    WellKnownKey(
        "ema_momentum",
        "torch.optim.swa_utils.get_ema_multi_avg_fn",
        "decay",
        requires_sibling="use_ema",
    ),
    WellKnownKey(
        "swa_epoch_start",
        "lightning.pytorch.callbacks.StochasticWeightAveraging",
        "swa_epoch_start",
    ),
    WellKnownKey(
        "swa_start",
        "lightning.pytorch.callbacks.StochasticWeightAveraging",
        "swa_epoch_start",
        ints_only=True,
    ),
)
_TEACHER_WORDS = (
    "teacher",
    "student",
    "momentum_encoder",
    "target_encoder",
    "target_net",
    "moco",
    "byol",
    "dino",
)
_TRAINER = "lightning.pytorch.Trainer"
_HYDRA_RESERVED = re.compile(r"^_\w+_$")
_INTERPOLATION = re.compile(r"^\$\{([A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*)\}$")


# Where a synthetic token came from ---------------------------------------------------------
@dataclass
class Spot:
    """A YAML key, value or object that a token of the synthetic module stands for."""

    kind: str  # "value", "key" or "object"
    doc: int
    path: tuple[Any, ...]  # keys/indexes from the document's root to the node
    start: Position  # in the YAML file, 1-based
    end: Position
    text: str  # the scalar's text in the file
    value: Any = None


@dataclass
class _Emitted:
    spot: Spot
    end: Position  # the token's end in the synthetic module


@dataclass
class Translation:
    """The synthetic module and where its tokens came from."""

    code: str
    spots: dict[tuple[int, int], _Emitted] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # constant name -> ${path}
    by_line: dict[int, Spot] = field(default_factory=dict)

    def spot_at(self, position: Position) -> _Emitted | None:
        return self.spots.get((position.line, position.column))

    def nearest(self, position: Position) -> Spot | None:
        """The spot of the token at ``position``, else of its line, else the one before."""
        found = self.spot_at(position)
        if found is not None:
            return found.spot
        for line in range(position.line, 0, -1):
            spot = self.by_line.get(line)
            if spot is not None:
                return spot
        return None


# The translation -----------------------------------------------------------------------
class _Builder:
    def __init__(self, text: str, documents: list[Any]) -> None:
        self.source = text
        self.lines = LineIndex(text)
        self.documents = documents
        self.imports: dict[str, str] = {}  # qualname -> local name
        self.constants: list[tuple[str, str, Spot]] = []  # name, literal, spot
        self.constant_names: dict[tuple[int, tuple[Any, ...]], str] = {}
        self.body: list[str] = []
        self.current = ""
        self.body_spots: list[tuple[int, int, int, Spot]] = []  # line, col, end col, spot
        self.referenced: set[tuple[int, tuple[Any, ...]]] = set()
        self.lightning = False

    # Writing ----------------------------------------------------------------------------
    def write(self, text: str, spot: Spot | None = None) -> None:
        if spot is not None:
            column = len(self.current) + 1
            self.body_spots.append((len(self.body) + 1, column, column + len(text), spot))
        self.current += text

    def newline(self) -> None:
        self.body.append(self.current)
        self.current = ""

    def local_name(self, qualname: str) -> str:
        name = self.imports.get(qualname)
        if name is None:
            short = qualname.rsplit(".", 1)[-1]
            taken = set(self.imports.values())
            name = short if short not in taken else f"{short}_{len(taken)}"
            self.imports[qualname] = name
        return name

    # Spots ------------------------------------------------------------------------------
    def _spot(self, kind: str, doc: int, path: tuple[Any, ...], span: Span, value: Any) -> Spot:
        start = self.lines.position(span.start)
        if _is_collection(value):
            return Spot(kind, doc, path, start, start, "", value)
        end = self.lines.position(span.end)
        return Spot(kind, doc, path, start, end, self.source[span.start : span.end], value)

    def value_spot(self, doc: int, path: tuple[Any, ...], container: Any, key: Any) -> Spot:
        spans = container.value_spans if isinstance(container, YamlMap) else container.spans
        return self._spot("value", doc, (*path, key), spans[key], container[key])

    def key_spot(self, doc: int, path: tuple[Any, ...], container: Any, key: Any) -> Spot:
        return self._spot("key", doc, (*path, key), container.key_spans[key], key)

    # Values -----------------------------------------------------------------------------
    def emit_value(
        self, doc: int, path: tuple[Any, ...], container: Any, key: Any, depth: int
    ) -> None:
        value = container[key]
        spot = self.value_spot(doc, path, container, key)
        child_path = (*path, key)
        if isinstance(value, dict):
            qualname = _object_name(value)
            if qualname is not None:
                self.emit_call(doc, child_path, value, qualname, depth, spot)
                return
            self.emit_dict(doc, child_path, value, depth, spot)
            return
        if isinstance(value, list):
            self.write("[", spot)
            self.newline()
            for i in range(len(value)):
                self.write(_INDENT * (depth + 1))
                self.emit_value(doc, child_path, value, i, depth + 1)
                self.write(",")
                self.newline()
            self.write(_INDENT * depth + "]")
            return
        self.write(self.literal(doc, value), spot)

    def literal(self, doc: int, value: Any) -> str:
        if isinstance(value, bool) or value is None:
            return repr(value)
        if isinstance(value, int):
            return repr(int(value))
        if isinstance(value, float):
            number = float(value)
            if number != number or number in (float("inf"), float("-inf")):
                return "_unknown"
            return repr(number)
        if isinstance(value, str):
            match = _INTERPOLATION.match(value.strip())
            if match is not None:
                return self.interpolation(doc, match.group(1))
            return repr(str(value))
        return "_unknown"

    def interpolation(self, doc: int, dotted: str, depth: int = 0) -> str:
        """A module constant holding the value an ``${a.b}`` interpolation points to."""
        keys = tuple(dotted.split("."))
        node: Any = self.documents[doc]
        parent: Any = None
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return "_unknown"
            parent, node = node, node[key]
        target = (doc, keys)
        self.referenced.add(target)
        if isinstance(node, str):
            match = _INTERPOLATION.match(node.strip())
            if match is not None and depth < 10:
                return self.interpolation(doc, match.group(1), depth + 1)
            return "_unknown"
        if isinstance(node, bool) or not isinstance(node, (int, float)):
            return "_unknown"
        name = self.constant_names.get(target)
        if name is None:
            name = "cfg_" + "__".join(keys)
            self.constant_names[target] = name
            spot = self.value_spot(doc, keys[:-1], parent, keys[-1])
            self.constants.append((name, self.literal(doc, node), spot))
        return name

    def emit_dict(
        self, doc: int, path: tuple[Any, ...], mapping: Any, depth: int, spot: Spot
    ) -> None:
        self.write("{", spot)
        self.newline()
        for key in mapping:
            self.write(_INDENT * (depth + 1))
            self.write(repr(str(key)), self.key_spot(doc, path, mapping, key))
            self.write(": ")
            self.emit_value(doc, path, mapping, key, depth + 1)
            self.write(",")
            self.newline()
        self.write(_INDENT * depth + "}")

    def emit_call(
        self,
        doc: int,
        path: tuple[Any, ...],
        mapping: Any,
        qualname: str,
        depth: int,
        spot: Spot,
    ) -> None:
        object_spot = self.object_spot(doc, path, mapping, spot)
        self.write(self.local_name(qualname), object_spot)
        self.write("(")
        self.newline()
        for args_path, container, key, positional in _arguments(path, mapping):
            self.write(_INDENT * (depth + 1))
            if not positional:
                self.write(str(key), self.key_spot(doc, args_path, container, key))
                self.write("=")
            self.emit_value(doc, args_path, container, key, depth + 1)
            self.write(",")
            self.newline()
        self.write(_INDENT * (depth + 1) + f"**{_STAR},")
        self.newline()
        self.write(_INDENT * depth + ")")

    def object_spot(
        self, doc: int, path: tuple[Any, ...], mapping: Any, fallback: Spot | None
    ) -> Spot:
        for key in ("class_path", "_target_"):
            if key in mapping:
                return self.value_spot(doc, path, mapping, key)
        assert fallback is not None
        return fallback

    # Statements -------------------------------------------------------------------------
    def statement(self, emit) -> None:
        self.write("_ = ")
        emit()
        self.newline()

    def translate(self) -> Translation:
        for doc, root in enumerate(self.documents):
            if not isinstance(root, dict):
                continue
            self.lightning = any(True for _ in _objects(root, ()) if "class_path" in _[1])
            for path, mapping in _api_objects(root, self.lightning):
                if not path:  # the file is the object (a Hydra config-group file)
                    spot = self.object_spot(doc, (), mapping, None)
                    name = _object_name(mapping)
                    self.statement(
                        lambda m=mapping, q=name, s=spot, d=doc: self.emit_call(d, (), m, q, 0, s)
                    )
                    continue
                if path == ("trainer",) and _object_name(mapping) is None:
                    spot = self.key_spot(doc, (), root, "trainer")
                    self.statement(
                        lambda m=mapping, s=spot, d=doc: self.emit_call(
                            d, ("trainer",), m, _TRAINER, 0, s
                        )
                    )
                    continue
                qualname = _object_name(mapping)
                assert qualname is not None
                parent_path, key = path[:-1], path[-1]
                parent = _get(root, parent_path)
                spot = self.value_spot(doc, parent_path, parent, key)
                self.statement(
                    lambda m=mapping, p=path, q=qualname, s=spot, d=doc: self.emit_call(
                        d, p, m, q, 0, s
                    )
                )
        body_lines, body_spots = self.body, self.body_spots
        self.body, self.body_spots = [], []
        for doc, root in enumerate(self.documents):
            if isinstance(root, dict):
                self.well_known(doc, root)
        keys_lines, keys_spots = self.body, self.body_spots
        header = [
            f"from {q.rsplit('.', 1)[0]} import {q.rsplit('.', 1)[1]}"
            + (f" as {n}" if n != q.rsplit(".", 1)[1] else "")
            for q, n in self.imports.items()
        ]
        translation = Translation("")
        lines = list(header)
        for name, literal, spot in self.constants:
            lines.append(f"{name} = {literal}")
            column = len(name) + 4
            self._record(translation, len(lines), column, column + len(literal), spot)
            translation.names[name] = "${" + ".".join(str(p) for p in spot.path) + "}"
        offset = len(lines)
        for line, col, end, spot in body_spots:
            self._record(translation, offset + line, col, end, spot)
        lines.extend(body_lines)
        offset = len(lines)
        for line, col, end, spot in keys_spots:
            self._record(translation, offset + line, col, end, spot)
        lines.extend(keys_lines)
        translation.code = "\n".join(lines) + "\n"
        return translation

    @staticmethod
    def _record(translation: Translation, line: int, col: int, end: int, spot: Spot) -> None:
        translation.spots[(line, col)] = _Emitted(spot, Position(line, end))
        translation.by_line.setdefault(line, spot)

    def well_known(self, doc: int, root: Any) -> None:
        known = {k.key: k for k in WELL_KNOWN}
        for path, mapping in _objects(root, ()):
            if _inside_object(root, path) or _object_name(mapping) is not None:
                continue
            words = (
                " ".join(str(p) for p in path).lower()
                + " "
                + " ".join(str(k) for k in mapping).lower()
            )
            if any(word in words for word in _TEACHER_WORDS):
                continue
            for key in mapping:
                entry = known.get(key) if isinstance(key, str) else None
                if entry is None or API_TABLE.get(entry.api) is None:
                    continue
                if (doc, (*path, key)) in self.referenced:
                    continue  # judged through the object that interpolates it
                if entry.requires_sibling and entry.requires_sibling not in mapping:
                    continue
                value = mapping[key]
                if isinstance(value, str):
                    match = _INTERPOLATION.match(value.strip())
                    if match is None:
                        continue
                elif (
                    isinstance(value, bool)
                    or not isinstance(value, (int, float))
                    or (entry.ints_only and not isinstance(value, int))
                ):
                    continue
                key_spot = self.key_spot(doc, path, mapping, key)
                name = self.local_name(entry.api)

                def emit(m=mapping, p=path, k=key, e=entry, s=key_spot, n=name) -> None:
                    self.write(n, s)
                    self.write("(")
                    self.newline()
                    self.write(_INDENT)
                    self.write(e.param, s)
                    self.write("=")
                    self.emit_value(doc, p, m, k, 1)
                    self.write(",")
                    self.newline()
                    self.write(_INDENT + f"**{_STAR},")
                    self.newline()
                    self.write(")")

                self.statement(emit)


def _is_collection(value: Any) -> bool:
    return isinstance(value, (dict, list))


def _get(root: Any, path: tuple[Any, ...]) -> Any:
    node = root
    for key in path:
        node = node[key]
    return node


def _object_name(mapping: Any) -> str | None:
    """The qualified name an object mapping instantiates, if it names one."""
    for key in ("class_path", "_target_"):
        value = mapping.get(key) if isinstance(mapping, dict) else None
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _known_spec(mapping: Any) -> ApiSpec | None:
    name = _object_name(mapping)
    return None if name is None else API_TABLE.get(name)


def _objects(
    node: Any, path: tuple[Any, ...], seen: set[int] | None = None
) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every mapping of the tree with its path, parents first; an aliased one once."""
    seen = set() if seen is None else seen
    if not _is_collection(node) or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _objects(value, (*path, key), seen)
    else:
        for i, value in enumerate(node):
            yield from _objects(value, (*path, i), seen)


def _api_objects(root: Any, lightning: bool) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Mappings to translate as top-level statements: known APIs (and Lightning's trainer),
    the root too (a Hydra config-group file is one object); an aliased one once."""
    seen: set[int] = set()

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
        if not _is_collection(node) or id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, dict):
            trainer = lightning and path == ("trainer",) and _object_name(node) is None
            if _known_spec(node) is not None or trainer:
                if trainer and not _contains_known(node):
                    return
                yield path, node
                return
            for key, value in node.items():
                yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, (*path, i))

    yield from walk(root, ())


def _contains_known(node: Any) -> bool:
    return any(_known_spec(m) is not None for _, m in _objects(node, ()))


def _inside_object(root: Any, path: tuple[Any, ...]) -> bool:
    """Whether the mapping at ``path`` holds (or is within) an object's arguments."""
    node = root
    for key in path:
        if isinstance(node, dict) and _object_name(node) is not None:
            return True
        node = node[key]
    return False


def _arguments(
    path: tuple[Any, ...], mapping: Any
) -> Iterator[tuple[tuple[Any, ...], Any, Any, bool]]:
    """(path of the container, container, key, positional) of each argument of an object."""
    if "class_path" in mapping:
        for section in ("init_args", "dict_kwargs"):
            args = mapping.get(section)
            if isinstance(args, dict):
                for key in args:
                    if isinstance(key, str) and key.isidentifier():
                        yield (*path, section), args, key, False
        return
    positional = mapping.get("_args_")
    if isinstance(positional, list):
        for i in range(len(positional)):
            yield (*path, "_args_"), positional, i, True
    for key in mapping:
        if isinstance(key, str) and key.isidentifier() and not _HYDRA_RESERVED.match(key):
            yield path, mapping, key, False


# Loading --------------------------------------------------------------------------------
def _load(text: str, size: int | None = None) -> list[Any]:
    return load(text, size=size)


def _decode(data: bytes | str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = before.count(b"\n") + 1
        column = error.start - (before.rfind(b"\n") + 1) + 1
        raise YamlError(
            f"cannot decode as UTF-8: byte 0x{data[error.start]:02x} is not valid here",
            line,
            column,
        ) from None


def _unparseable(path: str, error: YamlError) -> Diagnostic:
    position = Position(error.line, error.column)
    name = registry.by_code()["EMA901"].name
    return Diagnostic("EMA901", name, str(error), path, position, position)


# Linting --------------------------------------------------------------------------------
@dataclass
class _Lint:
    text: str
    diagnostics: list[Diagnostic]
    edits: dict[int, list[tuple[Spot, Any]]]  # id(diagnostic) -> scalar edits of its fix


def _relevant(data: bytes | str) -> bool:
    seen = text_for_matching(data)  # a UTF-16 file holds its triggers as other bytes
    raw = seen if isinstance(seen, bytes) else seen.encode("utf-8", "replace")
    return any(trigger in raw for trigger in TRIGGERS)


def _lint(data: bytes | str, path: str, settings: FileSettings) -> _Lint:
    text = _decode(data)
    documents = _load(text, len(data))
    result = _Lint(text, [], {})
    if settings.noqa and file_is_suppressed(text):
        return result
    translation = _Builder(text, documents).translate()
    analysis = engine.analyze(translation.code, path, settings)
    noqa = NoqaFilter(LineIndex(text)) if settings.noqa else None
    positions = analysis.positions
    reported: set[tuple[str, Position, Position, str]] = set()
    for diagnostic in analysis.diagnostics:
        mapped = _map(diagnostic, translation)
        if mapped is None:
            continue
        seen = (mapped.code, mapped.start, mapped.end, mapped.message)
        if seen in reported:
            continue  # an object used twice through an alias: one finding where it is written
        reported.add(seen)
        if noqa is not None and noqa.suppressed(mapped.code, mapped.name, mapped.line, None):
            continue
        edits = _fix_edits(diagnostic.fix, translation, positions) if diagnostic.fix else None
        if diagnostic.fix is not None and edits is None:
            mapped.fix = None  # a fix that is not a scalar edit cannot be written into YAML
        if edits:
            result.edits[id(mapped)] = edits
        result.diagnostics.append(mapped)
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result


def _map(diagnostic: Diagnostic, translation: Translation) -> Diagnostic | None:
    spot = translation.nearest(diagnostic.start)
    if spot is None:
        if diagnostic.code.startswith("EMA9"):
            start = Position(1, 1)
            return replace(diagnostic, start=start, end=start, statement_line=None)
        return None
    message = diagnostic.message
    for name, dotted in translation.names.items():
        message = re.sub(rf"\b{re.escape(name)}\b", dotted, message)
    return replace(
        diagnostic,
        message=message,
        start=spot.start,
        end=spot.end,
        statement_line=None,
        text_edits=None,
    )


def _fix_edits(fix: Fix, translation: Translation, positions) -> list[tuple[Spot, Any]] | None:
    """The fix as (YAML scalar, new value) pairs, or None if some edit is not one."""
    if positions is None:
        return None
    edits: list[tuple[Spot, Any]] = []
    empty = cst.Module(body=[])
    for edit in fix.edits:
        if edit.kind is not EditKind.REPLACE or edit.target is None or edit.target not in positions:
            return None
        start, end = positions.range(edit.target)
        emitted = translation.spot_at(start)
        replacement = edit.replacement
        if emitted is None:
            return None
        if isinstance(replacement, cst.Arg) and isinstance(edit.target, cst.Arg):
            pairs = _arg_edits(edit.target, replacement, emitted.spot, translation, positions)
            if pairs is None:
                return None
            edits.extend(pairs)
            continue
        if emitted.end != end or not isinstance(replacement, cst.BaseExpression):
            return None  # only whole tokens map to whole YAML scalars
        try:
            value = ast.literal_eval(empty.code_for_node(replacement))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            if emitted.spot.kind == "key" and isinstance(replacement, cst.Name):
                value = replacement.value
            else:
                return None
        edits.append((emitted.spot, value))
    return edits


def _arg_edits(old: cst.Arg, new: cst.Arg, key_spot: Spot, translation, positions):
    """A replaced argument: a renamed keyword, a new value, or both."""
    empty = cst.Module(body=[])
    pairs: list[tuple[Spot, Any]] = []
    if old.keyword is None or new.keyword is None:
        return None
    if old.keyword.value != new.keyword.value:
        pairs.append((key_spot, new.keyword.value))
    if empty.code_for_node(old.value) != empty.code_for_node(new.value):
        if old.value not in positions:
            return None
        emitted = translation.spot_at(positions.range(old.value)[0])
        if emitted is None:
            return None
        try:
            pairs.append((emitted.spot, ast.literal_eval(empty.code_for_node(new.value))))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return pairs


# Writing scalars -----------------------------------------------------------------------
_PLAIN = re.compile(r"^[A-Za-z_][\w./-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def yaml_scalar(value: Any, old_text: str) -> str:
    """``value`` written as a YAML scalar, in the style of the text it replaces."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"  # YAML 1.1 readers need the dot
        return text
    text = str(value)
    if old_text[:1] == "'":
        return "'" + text.replace("'", "''") + "'"
    if old_text[:1] == '"' or not _PLAIN.match(text) or text.lower() in _YAML_WORDS:
        import json

        return json.dumps(text, ensure_ascii=False)
    return text


def _apply(text: str, edits: list[tuple[Spot, Any]]) -> str:
    index = LineIndex(text)

    def offset(position: Position) -> int:
        return index.starts[position.line - 1] + position.column - 1

    for spot, value in sorted(edits, key=lambda e: offset(e[0].start), reverse=True):
        start, end = offset(spot.start), offset(spot.end)
        new = yaml_scalar(value, spot.text)
        text = text[:start] + new + _realign(text[end:], len(new) - (end - start))
    return text


def _realign(after: str, growth: int) -> str:
    """Keep a trailing comment in its column when a value grows or shrinks on its line."""
    match = re.match(r"( +)#", after)
    if match is None or growth == 0:
        return after
    spaces = len(match.group(1))
    if match.group(1) and growth > 0:
        keep = max(spaces - growth, 1)
    else:
        keep = spaces - growth if spaces > 1 or growth < 0 else spaces
    return " " * keep + after[spaces:]


def _verify(text: str, edits: list[tuple[Spot, Any]]) -> bool:
    """The edited text loads, and each edited node holds its new value."""
    try:
        documents = _load(text)
    except YamlError:
        return False
    for spot, value in edits:
        try:
            parent = _get(documents[spot.doc], spot.path[:-1])
        except (KeyError, IndexError, TypeError):
            return False
        if spot.kind == "key":
            if value not in parent or spot.value in parent:
                return False
        else:
            try:
                got = parent[spot.path[-1]]
            except (KeyError, IndexError, TypeError):
                return False
            if got != value or (type(got) is bool and type(value) is not bool):
                return False
    return True


def _overlaps(spots: list[Spot], taken: list[tuple[Position, Position]]) -> bool:
    return any(
        (s.start < end and start < s.end) or s.start == start for s in spots for start, end in taken
    )


def _fix(
    data: bytes | str, path: str, settings: FileSettings
) -> tuple[str, str, int, list[Diagnostic]]:
    """Apply the allowed fixes, re-linting until nothing more applies (as the engine does)."""
    original = text = _decode(data)
    applied = 0
    errors: list[Diagnostic] = []
    rejected: set[tuple[str, str, int]] = set()
    one_at_a_time = False
    for _ in range(MAX_FIX_PASSES):
        lint = _lint(text, path, settings)
        chosen: list[tuple[Diagnostic, list[tuple[Spot, Any]]]] = []
        taken: list[tuple[Position, Position]] = []
        for d in lint.diagnostics:
            edits = lint.edits.get(id(d))
            key = (d.code, d.message, d.line)
            if not edits or d.fix is None or not settings.allows(d.fix) or key in rejected:
                continue
            spots = [spot for spot, _ in edits]
            if _overlaps(spots, taken) or (one_at_a_time and chosen):
                continue
            taken.extend((s.start, s.end) for s in spots)
            chosen.append((d, edits))
        if not chosen:
            break
        all_edits = [e for _, edits in chosen for e in edits]
        new_text = _apply(text, all_edits)
        if new_text == text or not _verify(new_text, all_edits):
            for d, edits in chosen:
                alone = _apply(text, edits)
                if alone == text or not _verify(alone, edits):
                    rejected.add((d.code, d.message, d.line))
                    errors.append(_fix_error(d))
            one_at_a_time = True
            continue
        applied += len(chosen)
        text = new_text
    remaining = _lint(text, path, settings).diagnostics
    if "EMA903" in settings.ignored:
        errors = []
    return original, text, applied, sorted([*remaining, *errors], key=Diagnostic.sort_key)


def _fix_error(d: Diagnostic) -> Diagnostic:
    name = registry.by_code()["EMA903"].name
    return Diagnostic(
        "EMA903",
        name,
        f"the fix of {d.code} ({d.name}) would not write a valid YAML value and was not "
        "applied; please report this bug",
        d.path,
        d.start,
        d.end,
    )


def _with_text_edits(lint: _Lint) -> list[Diagnostic]:
    for d in lint.diagnostics:
        edits = lint.edits.get(id(d))
        if d.fix is None or not edits:
            continue
        d.text_edits = tuple(
            TextEdit(spot.start, spot.end, yaml_scalar(value, spot.text)) for spot, value in edits
        )
    return lint.diagnostics


def _encode(text: str, like: bytes | str) -> bytes:
    bom = isinstance(like, bytes) and like.startswith(b"\xef\xbb\xbf")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


def _guarded(path: str, settings: FileSettings, work) -> SourceOutcome:
    """``work()``, with a file ema-lint cannot read (or its own bug) as one finding."""
    try:
        return work()
    except YamlError as error:
        return SourceOutcome([] if "EMA901" in settings.ignored else [_unparseable(path, error)])
    except RecursionError:
        error = YamlError("not read: nested deeper than ema-lint follows")
        return SourceOutcome([] if "EMA901" in settings.ignored else [_unparseable(path, error)])
    except Exception as error:  # a bug of ours must not end the run for the other files
        if "EMA902" in settings.ignored:
            return SourceOutcome()
        start = Position(1, 1)
        message = (
            f"the YAML reader crashed on this file: {type(error).__name__}: "
            f"{_first_line(error)}; please report this bug"
        )
        name = registry.by_code()["EMA902"].name
        return SourceOutcome([Diagnostic("EMA902", name, message, path, start, start)])


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


class YamlSource:
    suffixes = (".yaml", ".yml")

    def lint(
        self, data: bytes, path: str, settings: FileSettings, *, text_edits: bool = False
    ) -> SourceOutcome:
        if not _relevant(data):
            return SourceOutcome()

        def work() -> SourceOutcome:
            lint = _lint(data, path, settings)
            return SourceOutcome(_with_text_edits(lint) if text_edits else lint.diagnostics)

        return _guarded(path, settings, work)

    def fix(
        self, data: bytes, path: str, settings: FileSettings, *, text_edits: bool = False
    ) -> SourceOutcome:
        if not _relevant(data):
            return self.lint(data, path, settings, text_edits=text_edits)

        def work() -> SourceOutcome:
            original, text, applied, diagnostics = _fix(data, path, settings)
            if text_edits:
                lint = _lint(text, path, settings)
                errors = [d for d in diagnostics if d.code == "EMA903"]
                diagnostics = sorted([*_with_text_edits(lint), *errors], key=Diagnostic.sort_key)
            fixed = _encode(text, data) if text != original else None
            return SourceOutcome(diagnostics, fixed=fixed, applied=applied if fixed else 0)

        return _guarded(path, settings, work)

    def diff(self, path: str, old: bytes, new: bytes) -> str:
        import difflib

        return "".join(
            difflib.unified_diff(
                LineIndex(_decode(old)).lines(),
                LineIndex(_decode(new)).lines(),
                fromfile=path,
                tofile=path,
            )
        )


SOURCE = YamlSource()
