"""Positions and edits between ema-lint's counting and the protocol's (no server needed)."""

from __future__ import annotations

import json

import pytest

from ema_lint.diagnostics import Position, TextEdit
from ema_lint.server import text as textlib
from ema_lint.server.cells import CellMap


@pytest.mark.parametrize(
    ("encoding", "column"),
    [(textlib.UTF16, 3), (textlib.UTF8, 6), (textlib.UTF32, 2)],
)
def test_client_columns_by_encoding(encoding: str, column: int):
    lines = textlib.Lines("x\r\né😀z\ry\n")
    offset = lines.offset_of(2, 3)  # the "z" after an accent and an emoji
    assert lines.text[offset] == "z"
    assert lines.to_client(offset, encoding) == (1, column)
    assert lines.from_client(1, column, encoding) == offset
    assert lines.to_client(lines.offset_of(3, 1), encoding) == (2, 0)  # a CR ends a line


def test_positions_past_the_end_are_clamped():
    lines = textlib.Lines("ab\ncd")
    assert lines.offset(0, 99) == 2
    assert lines.offset(7, 0) == 5
    assert lines.from_client(9, 0, textlib.UTF16) == 5


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("a = 1\n", "a = 2\n"),
        ("x\r\ny\r\n", "x\r\nz\r\ny\r\n"),  # a line added: the CRLF pair is never split
        ("x\r\n", "x\r\n\r\n"),
        ("abc", ""),
        ("", "abc"),
        ("aaaa", "aa"),
    ],
)
def test_difference_is_one_edit_that_rebuilds_the_new_text(old: str, new: str):
    edit = textlib.difference(old, new)
    assert edit is not None
    assert textlib.apply(old, [edit]) == new
    assert old[edit.start : edit.end].count("\r") == old[edit.start : edit.end].count("\r\n")
    assert not old[: edit.start].endswith("\r") or not old[edit.start :].startswith("\n")
    assert textlib.difference(new, new) is None


def test_overlapping_edits_are_refused():
    with pytest.raises(ValueError):
        textlib.apply("abcdef", [textlib.Edit(0, 3, "x"), textlib.Edit(2, 4, "y")])


def _notebook(source) -> str:
    return json.dumps(
        {
            "cells": [
                {"cell_type": "markdown", "source": "# t"},
                {"cell_type": "code", "source": source, "metadata": {}, "outputs": []},
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
        indent=1,
    )


@pytest.mark.parametrize("ensure_ascii", [True, False])
@pytest.mark.parametrize("as_list", [True, False])
def test_cell_positions_map_to_the_json_text(as_list: bool, ensure_ascii: bool):
    cell = 's = "é\\t😀"\nema = f(decay=0.9)\n'
    source = cell.splitlines(keepends=True) if as_list else cell
    text = json.dumps(json.loads(_notebook(source)), indent=1, ensure_ascii=ensure_ascii)
    cells = CellMap(text)
    assert cells.cell_text(2) == cell
    # Every character of the cell maps to where it is written in the file.
    for index, char in enumerate(cell):
        line = cell.count("\n", 0, index) + 1
        column = index - (cell.rfind("\n", 0, index) + 1) + 1
        offset = cells.offset(2, Position(line, column))
        written = json.dumps(char, ensure_ascii=ensure_ascii)[1:-1]
        assert text[offset : offset + len(written)] == written
    fixed = cells.with_cell_edits(2, (TextEdit(Position(2, 17), Position(2, 17), "99"),))
    assert fixed is not None
    assert json.loads(fixed)["cells"][1]["source"] == (
        [cell.splitlines(True)[0], "ema = f(decay=0.999)\n"]
        if as_list
        else cell.replace("0.9)", "0.999)")
    )


def test_bom_shifts_cell_offsets():
    text = "\ufeff" + _notebook(["x = 1\n"])
    cells = CellMap(text)
    offset = cells.offset(2, Position(1, 1))
    assert text[offset] == "x"
