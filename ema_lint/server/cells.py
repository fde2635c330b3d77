"""Notebook cells inside the notebook's JSON text: where each character of a cell sits.

An editor shows a ``.ipynb`` file as its JSON; ema-lint reports a notebook finding by cell
and position in that cell. Each cell's ``source`` value (a JSON string, or a list of
strings) is scanned once, so that every character of the cell's text maps to its offset in
the file, escapes (``\\n``, ``\\"``, ``\\u00e9``, surrogate pairs) included. Fixes and
suppressions change a cell's text and are written back by the notebook source's own writer,
which keeps the file's layout.
"""

from __future__ import annotations

import json

from ..diagnostics import Position, TextEdit
from ..sources import notebook
from . import text as textlib

_SIMPLE_ESCAPES = frozenset('"\\/bfnrt')


def _string_offsets(raw: str, start: int, offsets: list[int]) -> int:
    """Append the offset of each character of the JSON string at ``raw[start]``; return
    the offset after its closing quote."""
    i = start + 1
    while i < len(raw):
        ch = raw[i]
        if ch == '"':
            return i + 1
        if ch != "\\":
            offsets.append(i)
            i += 1
            continue
        escape = raw[i + 1 : i + 2]
        if escape in _SIMPLE_ESCAPES:
            offsets.append(i)
            i += 2
            continue
        if escape != "u":
            raise ValueError("invalid escape")
        code = int(raw[i + 2 : i + 6], 16)
        length = 6
        if 0xD800 <= code < 0xDC00 and raw[i + 6 : i + 8] == "\\u":
            low = int(raw[i + 8 : i + 12], 16)
            if 0xDC00 <= low < 0xE000:
                length = 12  # one character of the decoded text
        offsets.append(i)
        i += length
    raise ValueError("unterminated string")


def _value_offsets(raw: str, start: int, end: int) -> list[int]:
    """The offset of each character of a ``source`` value, then the offset after it."""
    offsets: list[int] = []
    i = start
    if raw[i] == '"':
        after = _string_offsets(raw, i, offsets)
        offsets.append(after - 1)
        return offsets
    # A list of strings: each item's characters, in order.
    last = i + 1
    i += 1
    while i < end:
        if raw[i] == '"':
            after = _string_offsets(raw, i, offsets)
            last, i = after - 1, after
        else:
            i += 1
    offsets.append(last)
    return offsets


class CellMap:
    """Positions of a notebook's cells in the notebook's text (as the editor holds it)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.shift = 1 if text.startswith("\ufeff") else 0
        self.body = text[self.shift :]
        self.lines = textlib.Lines(text)
        self._offsets: dict[int, list[int]] = {}
        self._cell_lines: dict[int, textlib.Lines] = {}
        try:
            spans = notebook.source_spans(self.body)
        except (ValueError, IndexError):
            spans = {}
        for number, (start, end) in spans.items():
            try:
                offsets = _value_offsets(self.body, start, end)
                value = json.loads(self.body[start:end])
            except (ValueError, IndexError):
                continue
            cell_text = value if isinstance(value, str) else "".join(value)
            if len(offsets) != len(cell_text) + 1:
                continue
            self._offsets[number] = offsets
            self._cell_lines[number] = textlib.Lines(cell_text)

    def offset(self, cell: int | None, position: Position) -> int:
        """Offset in the notebook's text of a position (in ``cell``, or in the file)."""
        if cell is None or cell not in self._offsets:
            return self.lines.offset_of(position.line, position.column)
        index = self._cell_lines[cell].offset_of(position.line, position.column)
        return self._offsets[cell][index] + self.shift

    def cell_text(self, cell: int) -> str | None:
        lines = self._cell_lines.get(cell)
        return None if lines is None else lines.text

    def with_cell(self, cell: int, new_text: str) -> str | None:
        """The notebook's text with the text of ``cell`` replaced (None if unreadable)."""
        try:
            nb = notebook.read(self.text)
        except notebook.NotebookError:
            return None
        written = notebook.write_cells(nb, {cell: new_text}).decode("utf-8-sig")
        return ("\ufeff" if self.shift else "") + written

    def with_cell_edits(self, cell: int, edits: tuple[TextEdit, ...]) -> str | None:
        """The notebook's text with ema-lint text edits (positions in ``cell``) applied."""
        lines = self._cell_lines.get(cell)
        if lines is None:
            return None
        changes = [
            textlib.Edit(
                lines.offset_of(e.start.line, e.start.column),
                lines.offset_of(e.end.line, e.end.column),
                e.content,
            )
            for e in edits
        ]
        return self.with_cell(cell, textlib.apply(lines.text, changes))
