"""Where a notebook's cells sit in its JSON text, without loading the engine.

Reports that address a file's own lines (SARIF, GitHub annotations, GitLab code quality)
need a notebook finding's line in the ``.ipynb`` file, not in its cell: ``cell_file_lines``
gives, for each cell, the file line where each of its source lines is written.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from json.decoder import scanstring

_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


_DECODER = json.JSONDecoder()


def _value_end(text: str, i: int) -> int:
    return _DECODER.raw_decode(text, i)[1]


def source_spans(text: str) -> dict[int, tuple[int, int]]:
    """Offsets of each cell's ``source`` value in the notebook's text, by cell number."""
    spans: dict[int, tuple[int, int]] = {}
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        return spans
    for key, start in _members(text, i):
        if key != "cells" or text[start : start + 1] != "[":
            continue
        j = _skip(text, start + 1)
        number = 0
        while j < len(text) and text[j] != "]":
            number += 1
            if text[j] == "{":
                for cell_key, value_start in _members(text, j):
                    if cell_key == "source":
                        spans[number] = (value_start, _value_end(text, value_start))
            j = _skip(text, _value_end(text, j))
            if text[j : j + 1] == ",":
                j = _skip(text, j + 1)
    return spans


def _members(text: str, i: int) -> Iterator[tuple[str, int]]:
    """(key, value offset) of each member of the object at ``i``."""
    j = _skip(text, i + 1)
    while j < len(text) and text[j] != "}":
        key, j = scanstring(text, j + 1)
        j = _skip(text, j)
        j = _skip(text, j + 1)  # the colon
        yield key, j
        j = _skip(text, _value_end(text, j))
        if text[j : j + 1] == ",":
            j = _skip(text, j + 1)


def cell_file_lines(text: str) -> dict[int, list[int]]:
    """For each cell number, the 1-based file line of each of its source lines (in order).

    nbformat writes ``source`` as a list with one string per line, each on its own line of
    the file; a string holding several lines, or a ``source`` written as one string, maps
    all its lines to the line where that string starts.
    """
    newlines = [i for i, char in enumerate(text) if char == "\n"]
    lines: dict[int, list[int]] = {}
    for number, (start, end) in source_spans(text).items():
        mapped: list[int] = []
        strings: list[int] = []
        if text[start : start + 1] == "[":
            j = _skip(text, start + 1)
            while j < end and text[j] == '"':
                strings.append(j)
                j = _skip(text, _value_end(text, j))
                if text[j : j + 1] == ",":
                    j = _skip(text, j + 1)
        elif text[start : start + 1] == '"':
            strings.append(start)
        pending_line_start = True
        for offset in strings:
            content, _ = scanstring(text, offset + 1)
            line = bisect.bisect_left(newlines, offset) + 1
            for char_index, char in enumerate(content):
                if pending_line_start:
                    mapped.append(line)
                    pending_line_start = False
                if char == "\n" or (
                    char == "\r" and content[char_index + 1 : char_index + 2] != "\n"
                ):
                    pending_line_start = True
        lines[number] = mapped
    return lines
