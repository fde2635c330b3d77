"""YAML documents as plain containers that remember where each key and value is written.

PyYAML (a dependency of libcst, and of ema-lint) *composes* each document into nodes with
exact marks; nothing is ever *constructed* from a tag: ``!!python/object`` and any other
tag that is not a plain mapping, sequence or scalar of the YAML core schema is read as an
opaque value. Scalars are typed as OmegaConf (Hydra) reads them: YAML 1.1 with ``1e-4`` a
float and no timestamps.

Anchors, aliases and merge keys (``<<: *base``) are resolved once: an alias is the same
container as its anchor (so its positions are where the value is written), a merge copies
the entries its mapping does not set. A document refers to itself (a recursive alias) or
expands, counting each alias in full, to more than ``MAX_EXPANDED_NODES`` nodes (an alias
bomb), or its file is larger than ``MAX_YAML_BYTES``: it is refused with a ``YamlError``,
and the caller reports it on one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_YAML_BYTES = 1_000_000  # a training config is a few kilobytes; beyond this it is data
MAX_EXPANDED_NODES = 100_000  # real configs hold hundreds; an alias bomb holds billions

_CORE = "tag:yaml.org,2002:"
_MERGE = _CORE + "merge"
# An anchor or a tag before a node: its value starts after them.
_PROPERTIES = re.compile(r"(?:(?:&[^\s,\[\]{}]+|![^\s,\[\]{}]*|!<[^>]*>)\s+)*")
_OMEGACONF_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+][0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class YamlError(Exception):
    """A file that is not read: the message is one line, the position 1-based."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


@dataclass(frozen=True)
class Span:
    """Where a node is written: character offsets into the decoded text."""

    start: int
    end: int


@dataclass(frozen=True)
class Opaque:
    """A value ema-lint does not interpret: a tagged node, a timestamp, a complex key."""

    text: str


class YamlMap(dict):
    """A mapping with the spans of its keys and of its values."""

    def __init__(self, flow: bool = False) -> None:
        super().__init__()
        self.flow = flow
        self.key_spans: dict[Any, Span] = {}
        self.value_spans: dict[Any, Span] = {}


class YamlList(list):
    """A sequence with the span of each item."""

    def __init__(self, flow: bool = False) -> None:
        super().__init__()
        self.flow = flow
        self.spans: list[Span] = []


def available() -> bool:
    """Whether PyYAML can be imported (it is a dependency; a broken install may lack it)."""
    return _yaml() is not None


def _yaml() -> Any:
    try:
        import yaml
    except ImportError:
        try:
            import yaml_ft as yaml  # the free-threading build libcst uses on Python 3.13
        except ImportError:
            return None
    return yaml


_LOADER: Any = None


def _loader() -> Any:
    """A composing loader (libyaml's when built) with OmegaConf's scalar resolution."""
    global _LOADER
    if _LOADER is None:
        yaml = _yaml()
        base = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

        class Loader(base):  # type: ignore[misc, valid-type]
            pass

        Loader.yaml_implicit_resolvers = {
            first: [(tag, rx) for tag, rx in resolvers if tag != _CORE + "timestamp"]
            for first, resolvers in base.yaml_implicit_resolvers.items()
        }
        Loader.add_implicit_resolver(_CORE + "float", _OMEGACONF_FLOAT, list("-+0123456789."))
        _LOADER = Loader
    return _LOADER


def load(text: str, *, size: int | None = None) -> list[Any]:
    """The documents of ``text`` as ``YamlMap``/``YamlList``/scalars; ``YamlError`` if refused."""
    if (size if size is not None else len(text)) > MAX_YAML_BYTES:
        raise YamlError(
            f"not read: the file is over {MAX_YAML_BYTES // 1_000_000} MB "
            "(a training config is a few kilobytes; this is data)"
        )
    yaml = _yaml()
    if yaml is None:
        raise YamlError("not read: PyYAML is not installed (pip install PyYAML)")
    try:
        nodes = list(yaml.compose_all(text, Loader=_loader()))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "invalid YAML"
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        raise YamlError(f"invalid YAML: {_one_line(problem)}", line, column) from None
    except yaml.reader.ReaderError as error:
        character = error.character
        character = chr(character) if isinstance(character, int) else character
        raise YamlError(
            f"invalid YAML: character {character!r} is not allowed in YAML",
            *_line_column(text, error.position),
        ) from None
    except (yaml.YAMLError, RecursionError, ValueError) as error:
        raise YamlError(f"invalid YAML: {_one_line(str(error))}") from None
    composer = _Composer(text, yaml)
    try:
        return [composer.value(node) for node in nodes if node is not None]
    except RecursionError:
        raise YamlError("not read: nested deeper than ema-lint follows") from None


def _one_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else "invalid YAML"


def _line_column(text: str, offset: int) -> tuple[int, int]:
    from ..positions import LineIndex

    position = LineIndex(text).position(max(0, min(offset, len(text))))
    return position.line, position.column


class _Composer:
    """Nodes to containers, each node once (an alias is its anchor's container)."""

    def __init__(self, text: str, yaml: Any) -> None:
        self.text = text
        self.yaml = yaml
        constructor = yaml.constructor.SafeConstructor()
        self.construct = {
            _CORE + "int": constructor.construct_yaml_int,
            _CORE + "float": constructor.construct_yaml_float,
            _CORE + "bool": constructor.construct_yaml_bool,
            _CORE + "null": constructor.construct_yaml_null,
        }
        self.scalar_type = yaml.ScalarNode
        self.done: dict[int, tuple[Any, int]] = {}  # id(node) -> (value, expanded size)
        self.open: set[int] = set()  # nodes being composed (a recursive alias meets one)

    def refuse(self, message: str, node: Any) -> YamlError:
        line, column = node.start_mark.line + 1, node.start_mark.column + 1
        return YamlError(message, line, column)

    def span(self, node: Any) -> Span:
        start, end = node.start_mark.index, node.end_mark.index
        if self.text[start : start + 1] in ("&", "!"):
            skipped = _PROPERTIES.match(self.text, start)
            if skipped is not None and skipped.end() <= end:
                start = skipped.end()
        return Span(start, max(start, end))

    def value(self, node: Any) -> Any:
        return self.sized(node)[0]

    def sized(self, node: Any) -> tuple[Any, int]:
        """The node's value and how many nodes it stands for with every alias expanded."""
        key = id(node)
        found = self.done.get(key)
        if found is not None:
            return found
        if key in self.open:
            raise self.refuse("not read: an alias refers to the node that holds it", node)
        self.open.add(key)
        try:
            if isinstance(node, self.yaml.MappingNode):
                result = self.mapping(node)
            elif isinstance(node, self.yaml.SequenceNode):
                result = self.sequence(node)
            else:
                result = (self.scalar(node), 1)
        finally:
            self.open.discard(key)
        if result[1] > MAX_EXPANDED_NODES:
            raise self.refuse(
                f"not read: more than {MAX_EXPANDED_NODES:,} nodes once its aliases are expanded",
                node,
            )
        self.done[key] = result
        return result

    def scalar(self, node: Any) -> Any:
        tag = node.tag
        if tag == _CORE + "str" and type(node) is self.scalar_type:
            return node.value
        construct = self.construct.get(tag)
        if construct is None or type(node) is not self.scalar_type:
            return Opaque(node.value if isinstance(node.value, str) else tag)
        try:
            return construct(node)
        except (ValueError, TypeError, ArithmeticError, self.yaml.YAMLError):
            return Opaque(node.value)  # an integer of thousands of digits, ...

    def sequence(self, node: Any) -> tuple[Any, int]:
        if node.tag != _CORE + "seq":
            return Opaque(node.tag), 1
        result = YamlList(bool(node.flow_style))
        size = 1
        for item in node.value:
            value, count = self.sized(item)
            result.append(value)
            result.spans.append(self.span(item))
            size += count
        return result, size

    def mapping(self, node: Any) -> tuple[Any, int]:
        if node.tag != _CORE + "map":
            return Opaque(node.tag), 1
        result = YamlMap(bool(node.flow_style))
        size = 1
        merges: list[tuple[YamlMap, int]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merges.extend(self.merged(value_node))
                continue
            key = self.key(key_node)
            value, count = self.sized(value_node)
            result.pop(key, None)  # a repeated key: the last one counts, in its place
            result[key] = value
            result.key_spans[key] = self.span(key_node)
            result.value_spans[key] = self.span(value_node)
            size += 1 + count
        for source, count in merges:
            for key, value in source.items():
                if key in result:
                    continue  # the mapping's own keys, then earlier merges, win
                result[key] = value
                result.key_spans[key] = source.key_spans[key]
                result.value_spans[key] = source.value_spans[key]
            size += count
        return result, size

    def merged(self, node: Any) -> list[tuple[YamlMap, int]]:
        """The mappings a merge key brings in (with their sizes), in order of precedence."""
        nodes = node.value if isinstance(node, self.yaml.SequenceNode) else [node]
        found: list[tuple[YamlMap, int]] = []
        for item in nodes:
            value, count = self.sized(item)
            if not isinstance(value, YamlMap):
                raise self.refuse(
                    "invalid YAML: a merge key (<<) takes a mapping or a list of mappings",
                    item,
                )
            found.append((value, count))
        return found

    def key(self, node: Any) -> Any:
        if isinstance(node, self.yaml.ScalarNode):
            value = self.scalar(node)
            try:
                hash(value)
            except TypeError:
                return Opaque(node.value)
            return value
        span = self.span(node)
        return Opaque(self.text[span.start : span.end])  # a mapping or sequence as a key
