"""Findings under each file's name, then the summary: easy to read for many findings."""

from __future__ import annotations

from itertools import groupby
from typing import TextIO

from .base import RunResult, position_text, printable
from .text import _BOLD, _CYAN, _RED, _errors, _paint, summary_lines


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    for path, group in groupby(result.diagnostics, key=lambda d: d.path):
        found = list(group)
        stream.write(f"{_paint(printable(path), _BOLD, color)}:\n")
        width = max(len(position_text(d)) for d in found)
        for d in found:
            marker = " " + _paint("[*]", _CYAN, color) if result.fixable(d) else ""
            stream.write(
                f"  {position_text(d):<{width}} "
                f"{_paint(d.code, _BOLD + _RED, color)}{marker} {printable(d.message)}\n"
            )
        stream.write("\n")
    _errors(result, stream, color)
    for line in summary_lines(result, color):
        stream.write(line + "\n")
