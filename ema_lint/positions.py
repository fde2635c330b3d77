"""Positions for the few nodes that are reported, in one cheap code-generation pass.

libcst's ``PositionProvider`` records a range for every node of the module and costs more
than the parse itself. A linter needs positions only for what it reports (and for the
statements around them, for ``# noqa``), so this pass counts characters and records only
the requested nodes. It also yields the module's text, which is what the offsets index.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import libcst as cst
from libcst._nodes.internal import CodegenState

from .diagnostics import Position


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


class PositionTable:
    """Ranges (as offsets and positions) of a chosen set of nodes of one module.

    Offsets index the code libcst generates (``text``). libcst does not reproduce every
    file exactly: it drops a form feed (and the blanks around it) before a statement. When
    the original ``source`` is given, reported positions are those of the original, so
    that columns, and the text edits of machine-readable output, land where they belong.
    """

    def __init__(
        self, module: cst.Module, nodes: Iterable[cst.CSTNode], source: str | None = None
    ) -> None:
        state = _OffsetState(module, {id(n) for n in nodes})
        module._codegen(state)
        self.text = "".join(state.tokens)
        self.lines = LineIndex(self.text)
        self._found = state.found
        self._shifts = _column_shifts(self.lines, source) if source is not None else {}

    def offsets(self, node: cst.CSTNode) -> tuple[int, int]:
        start, end = self._found[id(node)]
        text = self.text
        # Ranges recorded from the whitespace-inclusive fallback: trim to the code.
        while start < end and text[start] in " \t\r\n\\":
            start += 1
        while end > start and text[end - 1] in " \t\r\n\\":
            end -= 1
        return start, end

    def range(self, node: cst.CSTNode) -> tuple[Position, Position]:
        start, end = self.offsets(node)
        return self.in_source(self.lines.position(start)), self.in_source(self.lines.position(end))

    def in_source(self, position: Position) -> Position:
        """A position of ``text`` as a position of the original source."""
        shift = self._shifts.get(position.line)
        return position if not shift else Position(position.line, position.column + shift)

    def __contains__(self, node: cst.CSTNode) -> bool:
        return id(node) in self._found


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
