"""The line checks the property tests rely on catch what they are meant to catch."""

from __future__ import annotations

import pytest

from tests.properties.invariants import _assert_within

OLD = b"a\nb\nc\nd\n"


def test_a_move_keeps_the_other_lines_in_order() -> None:
    _assert_within(OLD, b"b\nc\na\nd\n", {1}, "move", moves=True)


@pytest.mark.parametrize("new", [b"B\nc\na\nd\n", b"c\nb\na\nd\n", b"b\nc\na\n"])
def test_a_move_that_changes_reorders_or_drops_another_line_fails(new: bytes) -> None:
    with pytest.raises(AssertionError):
        _assert_within(OLD, new, {1}, "move", moves=True)


def test_an_edit_outside_the_statement_fails() -> None:
    with pytest.raises(AssertionError):
        _assert_within(OLD, b"a\nB\nc\nd\n", {1}, "edit")
