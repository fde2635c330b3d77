"""ruff's default look: each finding with its source line, a caret under the range, and the
fix as a diff of the lines it changes."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from ..diagnostics import Diagnostic
from .base import RunResult, location_text, printable
from .text import _BOLD, _CYAN, _RED, _errors, _paint, summary_lines

_GREEN = "\033[32m"


class _Sources:
    def __init__(self) -> None:
        self._lines: dict[str, list[str] | None] = {}

    def lines(self, path: str) -> list[str] | None:
        if path not in self._lines:
            try:
                text = Path(path).read_bytes().decode("utf-8-sig")
                self._lines[path] = text.splitlines()
            except (OSError, UnicodeDecodeError):
                self._lines[path] = None
        return self._lines[path]


def _fixed_lines(lines: list[str], d: Diagnostic) -> tuple[int, int, list[str]] | None:
    """(first line, last line, their text after the fix), from the fix's text edits."""
    edits = sorted(d.text_edits or (), key=lambda e: (e.start.line, e.start.column))
    if not edits:
        return None
    first, last = edits[0].start.line, max(e.end.line for e in edits)
    if last > len(lines):
        return None
    text = "\n".join(lines[first - 1 : last])
    offsets = [0]
    for line in lines[first - 1 : last]:
        offsets.append(offsets[-1] + len(line) + 1)

    def offset(line: int, column: int) -> int:
        return offsets[line - first] + column - 1

    for e in reversed(edits):
        start, end = offset(e.start.line, e.start.column), offset(e.end.line, e.end.column)
        text = text[:start] + e.content + text[end:]
    return first, last, text.split("\n")


def _finding(d: Diagnostic, result: RunResult, sources: _Sources, color: bool) -> list[str]:
    marker = " " + _paint("[*]", _CYAN, color) if result.fixable(d) else ""
    out = [
        f"{_paint(printable(location_text(d)), _BOLD, color)}: "
        f"{_paint(d.code, _BOLD + _RED, color)}{marker} {printable(d.message)}"
    ]
    lines = sources.lines(d.path) if d.cell is None else None
    if lines is not None and 1 <= d.start.line <= len(lines):
        source = lines[d.start.line - 1]
        width = len(str(d.end.line))
        out.append(f"{'':>{width}} |")
        out.append(f"{d.start.line:>{width}} | {printable(source)}")
        end = d.end.column if d.end.line == d.start.line else len(source) + 1
        carets = "^" * max(1, end - d.start.column)
        out.append(f"{'':>{width}} | {' ' * (d.start.column - 1)}{_paint(carets, _RED, color)}")
        out.append(f"{'':>{width}} |")
    if d.fix is not None:
        out.append(f"  = help: {d.fix.title} ({d.fix.applicability.value} fix)")
        fixed = _fixed_lines(lines, d) if lines is not None else None
        if fixed is not None:
            first, last, new = fixed
            for number in range(first, last + 1):
                out.append(_paint(f"  - {printable(lines[number - 1])}", _RED, color))
            for line in new:
                out.append(_paint(f"  + {printable(line)}", _GREEN, color))
    out.append("")
    return out


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    sources = _Sources()
    for d in result.diagnostics:
        for line in _finding(d, result, sources, color):
            stream.write(line + "\n")
    _errors(result, stream, color)
    for line in summary_lines(result, color):
        stream.write(line + "\n")
