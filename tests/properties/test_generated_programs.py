"""Arbitrary Python programs (hypothesmith), with averaging code spliced in: ema-lint holds up.

hypothesmith writes programs from Python's grammar (``from_grammar``) or from libcst's node
types (``from_node``, much slower, so fewer examples). Some use syntax libcst's parser does
not accept; those are discarded with ``assume``. Each program is checked bare with every
rule forced to run (no pre-filter), and with API calls, hand-written updates and casts
inserted at random places, under a random line-ending style, BOM or latin-1 cookie; the
invariants are in ``tests/properties/invariants.py``.
"""

from __future__ import annotations

import hypothesmith
import libcst as cst
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.profiles import examples
from tests.properties.invariants import BOM, check, file_settings
from tests.properties.payloads import spliced

SAFE = file_settings(unsafe=False)
UNSAFE = file_settings(unsafe=True)
EVERY_RULE = file_settings(unsafe=True, prefilter=False)


def _parses(data: bytes | str) -> bool:
    try:
        cst.parse_module(data)
    except Exception:
        return False
    return True


@st.composite
def envelope(draw, text: str) -> bytes:
    """``text`` with one line-ending style and an optional BOM or latin-1 cookie."""
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", newline)
    marker = draw(st.sampled_from(["none", "bom", "latin-1"]))
    if marker == "bom":
        return BOM + text.encode("utf-8")
    if marker == "latin-1":
        try:
            return f"# -*- coding: latin-1 -*-{newline}".encode() + text.encode("latin-1")
        except UnicodeEncodeError:
            pass
    return text.encode("utf-8")


def _check_program(draw, program: str) -> None:
    assume(_parses(program))
    check(program.encode("utf-8"), EVERY_RULE)
    source = draw(spliced(program))
    assume(source is not None and _parses(source))
    data = draw(envelope(source))
    assume(_parses(data))
    check(data, SAFE)
    check(data, UNSAFE)


@settings(max_examples=examples(0.4))
@given(st.data(), hypothesmith.from_grammar())
def test_programs_from_the_grammar(data: st.DataObject, program: str) -> None:
    _check_program(data.draw, program)


@settings(max_examples=examples(0.05))
@given(st.data(), hypothesmith.from_node())
def test_programs_from_libcst_nodes(data: st.DataObject, program: str) -> None:
    _check_program(data.draw, program)
