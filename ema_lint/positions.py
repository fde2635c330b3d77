"""Positions for the few nodes that are reported, without regenerating the module.

libcst's ``PositionProvider`` records a range for every node of the module and costs more
than the parse itself; even one code-generation pass over the whole module costs a third of
a parse. A linter needs positions only for what it reports (and for the statements around
them, for ``# noqa``). So the line where each top-level statement starts comes from a cheap
table (CPython's own parser, ``ast``, which gives statement lines at a tenth of the cost),
and only the top-level statements holding a reported node are generated, counting
characters and recording only the requested nodes. When the table cannot be trusted (the
source does not compile here, lone carriage returns, a statement whose first line does not
match), the whole module is generated as before.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import re
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import libcst as cst
from libcst._nodes.internal import CodegenState

from .diagnostics import Position

if TYPE_CHECKING:
    from .analysis.syntax.index import ModuleIndex


class _OffsetState(CodegenState):
    """A code generator that tracks the character offset and records target ranges."""

    def __init__(self, module: cst.Module, targets: set[int]) -> None:
        super().__init__(
            default_indent=module.default_indent, default_newline=module.default_newline
        )
        self.offset = 0
        self.targets = targets
        self.found: dict[int, tuple[int, int]] = {}
        self._pending: dict[int, int] = {}

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.tokens.append(token)
            self.offset += len(token)

    def before_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key in self.targets:
            self._pending[key] = self.offset

    def after_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        start = self._pending.pop(key, None)
        if start is not None and key not in self.found:
            self.found[key] = (start, self.offset)

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: cst.CSTNode | None = None,
        end_node: cst.CSTNode | None = None,
    ) -> Iterator[None]:
        key = id(node)
        if key not in self.targets:
            yield
            return
        # Hoisted bounds come from children generated inside this block: record them too.
        for extra in (start_node, end_node):
            if extra is not None:
                self.targets.add(id(extra))
        start = self.offset
        yield
        end = self.offset
        if start_node is not None and id(start_node) in self.found:
            start = self.found[id(start_node)][0]
        if end_node is not None and id(end_node) in self.found:
            end = self.found[id(end_node)][1]
        self.found[key] = (start, end)


class LineIndex:
    """Offsets to 1-based lines and columns of one text."""

    def __init__(self, text: str) -> None:
        self.text = text
        starts = [0]
        find = text.find
        i = 0
        length = len(text)
        while i < length:
            j = find("\n", i)
            k = find("\r", i)
            if j < 0 and k < 0:
                break
            if k >= 0 and (j < 0 or k < j):
                i = k + 2 if text.startswith("\r\n", k) else k + 1
            else:
                i = j + 1
            starts.append(i)
        self.starts = starts

    def position(self, offset: int) -> Position:
        line = bisect.bisect_right(self.starts, offset) - 1
        return Position(line + 1, offset - self.starts[line] + 1)

    def line_text(self, line: int) -> str:
        """The text of a 1-based line without its line ending."""
        if line < 1 or line > len(self.starts):
            return ""
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def lines(self) -> list[str]:
        """The lines with their endings, split where the parser splits them: ``\\n``,
        ``\\r\\n`` and ``\\r`` only (``str.splitlines`` also breaks at form feeds, U+2028
        and ``\\x1c``, which would misnumber a diff's hunks)."""
        text, starts = self.text, self.starts
        found = [text[start:end] for start, end in itertools.pairwise(starts)]
        if starts[-1] < len(text):
            found.append(text[starts[-1] :])
        return found


class _Chunk:
    """Generated code of the module or of one top-level statement, and where it starts."""

    __slots__ = ("first", "lines", "text")

    def __init__(self, text: str, first: int, lines: LineIndex | None = None) -> None:
        self.text = text
        self.first = first  # the source line of the text's first line
        self.lines = lines if lines is not None else LineIndex(text)


class PositionTable:
    """Ranges (as offsets and positions) of a chosen set of nodes of one module.

    Positions are those of the original ``source`` when it is given: libcst does not
    reproduce every file exactly (it drops a form feed, and the blanks around it, before a
    statement), so columns, and the text edits of machine-readable output, land where they
    belong. ``offsets`` are comparable with each other (they order and overlap like the
    nodes), not indexes into a particular text. ``text`` is the code libcst generates for
    the module (made on first use) and ``generated_lines`` its lines.

    With ``index`` and ``source`` only the top-level statements that hold a requested node
    are generated; without them, the whole module.
    """

    def __init__(
        self,
        module: cst.Module,
        nodes: Iterable[cst.CSTNode],
        source: str | None = None,
        index: ModuleIndex | None = None,
    ) -> None:
        self._module = module
        self._source = source
        self._text: str | None = None
        self._generated: LineIndex | None = None
        self._shifts: dict[int, int] | None = None
        # node id -> (start, end) offsets into the chunk of generated code that holds it
        self._found: dict[int, tuple[int, int, _Chunk]] = {}
        self._whole_chunk: _Chunk | None = None
        wanted = list(nodes)
        if not (source is not None and index is not None and self._by_statement(wanted, index)):
            self._whole(wanted)

    # Building ------------------------------------------------------------------------------
    def _whole(self, nodes: list[cst.CSTNode]) -> None:
        """One code-generation pass over the module (offsets into ``text``)."""
        state = _OffsetState(self._module, {id(n) for n in nodes})
        self._module._codegen(state)
        self._text = "".join(state.tokens)
        self._generated = LineIndex(self._text)
        self.lines = self._generated if self._source is None else LineIndex(self._source)
        chunk = self._whole_chunk = _Chunk(self._text, 1, self._generated)
        self._found = {key: (start, end, chunk) for key, (start, end) in state.found.items()}

    def _by_statement(self, nodes: list[cst.CSTNode], index: ModuleIndex) -> bool:
        """Generate only the top-level statements holding ``nodes``; False if unsure."""
        module = self._module
        source = self._source
        assert source is not None
        tops: dict[int, list[cst.CSTNode]] = {}
        statements: dict[int, cst.CSTNode] = {}
        body_ids = {id(s) for s in module.body}
        for node in nodes:
            top = node
            while id(top) not in body_ids:
                parent = index.parent(top)
                if parent is None or parent is module:
                    return False  # the module itself, or a node the index does not know
                top = parent
            tops.setdefault(id(top), []).append(node)
            statements[id(top)] = top
        if not tops:
            self._found = {}
            self.lines = LineIndex(source)
            return True
        first_lines = _statement_lines(module, source)
        if first_lines is None:
            return False
        lines = LineIndex(source)
        found: dict[int, tuple[int, int, _Chunk]] = {}
        for key, targets in tops.items():
            top = statements[key]
            state = _OffsetState(module, {id(n) for n in targets})
            top._codegen(state)
            text = "".join(state.tokens)
            first = first_lines[key]
            # The statement's code starts after its leading blank and comment lines.
            skipped = _leading_line_count(top)
            chunk = _Chunk(text, first)
            ours = chunk.lines.line_text(skipped + 1)
            theirs = lines.line_text(first + skipped)
            if ours != theirs and not theirs.endswith(ours):
                return False
            for node_key, (start, end) in state.found.items():
                found[node_key] = (start, end, chunk)
        self._found = found
        self.lines = lines
        return True

    # Queries -------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        """The code libcst generates for the module."""
        if self._text is None:
            self._text = self._module.code
        return self._text

    @property
    def generated_lines(self) -> LineIndex:
        """Lines of ``text`` (its positions map to the source with ``in_source``)."""
        if self._generated is None:
            self._generated = LineIndex(self.text)
        return self._generated

    def _trimmed(self, node: cst.CSTNode) -> tuple[int, int, _Chunk]:
        start, end, chunk = self._found[id(node)]
        text = chunk.text
        # Ranges recorded from the whitespace-inclusive fallback: trim to the code.
        while start < end and text[start] in " \t\r\n\\":
            start += 1
        while end > start and text[end - 1] in " \t\r\n\\":
            end -= 1
        return start, end, chunk

    def _position(self, offset: int, chunk: _Chunk) -> Position:
        local = chunk.lines.position(offset)
        if chunk is self._whole_chunk:
            return self.in_source(local)
        line = chunk.first + local.line - 1
        ours, theirs = chunk.lines.line_text(local.line), self.lines.line_text(line)
        if ours != theirs and theirs.endswith(ours):
            return Position(line, local.column + len(theirs) - len(ours))
        return Position(line, local.column)

    def offsets(self, node: cst.CSTNode) -> tuple[int, int]:
        start, end, chunk = self._trimmed(node)
        if chunk is self._whole_chunk:
            return start, end
        starts = self.lines.starts
        a, b = self._position(start, chunk), self._position(end, chunk)
        return starts[a.line - 1] + a.column - 1, starts[b.line - 1] + b.column - 1

    def range(self, node: cst.CSTNode) -> tuple[Position, Position]:
        start, end, chunk = self._trimmed(node)
        return self._position(start, chunk), self._position(end, chunk)

    def in_source(self, position: Position) -> Position:
        """A position of ``text`` as a position of the original source."""
        if self._shifts is None:
            source = self._source
            self._shifts = {} if source is None else _column_shifts(self.generated_lines, source)
        shift = self._shifts.get(position.line)
        return position if not shift else Position(position.line, position.column + shift)

    def __contains__(self, node: cst.CSTNode) -> bool:
        return id(node) in self._found


_LONE_CR = re.compile(r"\r(?!\n)")


def _statement_lines(module: cst.Module, source: str) -> dict[int, int] | None:
    """id of each top-level statement -> the source line its generated text starts on.

    From CPython's parser: each small statement of a line is one ``ast`` statement, each
    compound statement one (a decorated one starts at its first decorator). None when the
    two parsers disagree or the source does not compile on this Python.
    """
    if _LONE_CR.search(source):
        return None  # line counting differs between the parsers
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    body = tree.body
    found: dict[int, int] = {}
    at = 0
    for statement in module.body:
        if at >= len(body):
            return None
        node = body[at]
        if isinstance(statement, cst.SimpleStatementLine):
            at += len(statement.body)
            if at > len(body):
                return None
        else:
            at += 1
        line = node.lineno
        decorators = getattr(node, "decorator_list", None)
        if decorators:
            line = decorators[0].lineno
        found[id(statement)] = line - _leading_line_count(statement)
    return found if at == len(body) else None


def _leading_line_count(statement: cst.CSTNode) -> int:
    """Lines a statement's generated text has before its first line of code."""
    count = len(getattr(statement, "leading_lines", ()))
    decorators = getattr(statement, "decorators", ())
    if decorators:
        count += len(decorators[0].leading_lines)
    return count


def _column_shifts(generated: LineIndex, source: str) -> dict[int, int]:
    """Line -> characters the original has before what libcst generated for that line."""
    if generated.text == source:
        return {}
    original = LineIndex(source)
    shifts: dict[int, int] = {}
    for line in range(1, min(generated.line_count, original.line_count) + 1):
        ours, theirs = generated.line_text(line), original.line_text(line)
        if ours != theirs and theirs.endswith(ours):
            shifts[line] = len(theirs) - len(ours)
    return shifts
