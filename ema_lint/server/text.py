"""Offsets, lines and columns of a document, and edits between two versions of its text.

ema-lint counts positions as 1-based lines and 1-based columns in characters; the Language
Server Protocol counts 0-based lines and columns in the code units the client and server
agreed on (UTF-16 unless both said otherwise). Lines end at LF, CRLF or CR, as in both.
Nothing here knows about pygls: these are plain functions of text.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def _units(text: str, encoding: str) -> int:
    """Code units of ``text`` in ``encoding``."""
    if encoding == UTF32 or text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` (character offsets) with ``content``."""

    start: int
    end: int
    content: str


class Lines:
    """Where each line of a text starts, to turn offsets into positions and back."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [m.end() for m in _LINE_END.finditer(text)]

    def line_of(self, offset: int) -> int:
        """0-based line holding ``offset``."""
        return bisect.bisect_right(self.starts, offset) - 1

    def line_text(self, line: int) -> str:
        """Line ``line`` (0-based) without its line ending."""
        if not 0 <= line < len(self.starts):
            return ""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, line: int, column: int) -> int:
        """Offset of a 0-based line and 0-based character column (clamped to the line)."""
        if line < 0:
            return 0
        if line >= len(self.starts):
            return len(self.text)
        return self.starts[line] + min(max(column, 0), len(self.line_text(line)))

    def offset_of(self, line: int, column: int) -> int:
        """Offset of an ema-lint position: 1-based line, 1-based character column."""
        return self.offset(line - 1, column - 1)

    def to_client(self, offset: int, encoding: str) -> tuple[int, int]:
        """(line, column) of ``offset`` in the client's code units."""
        offset = min(max(offset, 0), len(self.text))
        line = self.line_of(offset)
        return line, _units(self.text[self.starts[line] : offset], encoding)

    def from_client(self, line: int, units: int, encoding: str) -> int:
        """Offset of a client position (0-based line, column in code units)."""
        if line >= len(self.starts):
            return len(self.text)
        text = self.line_text(max(line, 0))
        if encoding == UTF32 or text.isascii():
            return self.offset(line, units)
        count = 0
        for i, ch in enumerate(text):
            if count >= units:
                return self.starts[line] + i
            count += _units(ch, encoding)
        return self.starts[line] + len(text)


def apply(text: str, edits: Iterable[Edit]) -> str:
    """``text`` with non-overlapping ``edits`` applied."""
    parts: list[str] = []
    last = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        if edit.start < last:
            raise ValueError("overlapping edits")
        parts += [text[last : edit.start], edit.content]
        last = edit.end
    parts.append(text[last:])
    return "".join(parts)


def difference(old: str, new: str) -> Edit | None:
    """The one edit that turns ``old`` into ``new`` (None if they are equal): the common
    start and end are kept, so the editor moves neither the cursor nor unchanged lines."""
    if old == new:
        return None
    limit = min(len(old), len(new))
    start = 0
    while start < limit and old[start] == new[start]:
        start += 1
    end = 0
    while end < limit - start and old[-1 - end] == new[-1 - end]:
        end += 1
    # Never split a CRLF pair.
    if start > 0 and old[start - 1] == "\r" and old[start : start + 1] == "\n":
        start -= 1
    if end > 0 and old[-end] == "\n" and old[-end - 1 : -end] == "\r":
        end -= 1
    return Edit(start, len(old) - end, new[start : len(new) - end])
