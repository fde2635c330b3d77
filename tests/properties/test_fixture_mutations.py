"""Every fixture, mutated: layout changes keep the findings, nothing breaks the invariants.

Layout mutations must not change what ema-lint says: the same findings (code and message)
at the mapped lines, and fixing commutes with the mutation (fixing a CRLF copy gives the
CRLF copy of the fixed file; likewise for a BOM, an encoding cookie and tab indentation).
Content mutations (renamed identifiers, changed numbers) may change the findings; the
invariants of ``invariants.check`` hold for every one of them.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ema_lint import engine
from tests.fixture_cases import all_cases, settings_for
from tests.profiles import examples
from tests.properties import mutations
from tests.properties.invariants import check

CASES = [case for case in all_cases() if case.rule_code != "EMA901"]


def _findings(data: bytes, case, unsafe: bool) -> list[tuple[str, int, str]]:
    found = engine.lint(data, str(case.path), settings_for(case.path, unsafe=unsafe))
    return sorted((d.code, d.line, d.message) for d in found)


def _fixed(data: bytes, case, unsafe: bool) -> bytes:
    outcome = engine.fix(data, str(case.path), settings_for(case.path, unsafe=unsafe))
    assert isinstance(outcome.fixed, bytes)
    return outcome.fixed


LAYOUTS = {
    "crlf": lambda data: mutations.with_newline(data, b"\r\n"),
    "cr": lambda data: mutations.with_newline(data, b"\r"),
    "bom": mutations.with_bom,
    "bom-crlf": lambda data: mutations.with_bom(mutations.with_newline(data, b"\r\n")),
    "cookie": lambda data: mutations.with_cookie(data)[0],
    "cookie-cr": lambda data: mutations.with_cookie(mutations.with_newline(data, b"\r"))[0],
    "tabs": mutations.with_tabs,
}
_SHIFT = {"cookie": 1, "cookie-cr": 1}


@settings(max_examples=examples(0.5))
@given(st.sampled_from(CASES), st.sampled_from(sorted(LAYOUTS)), st.booleans())
def test_layout_mutations_commute_with_linting_and_fixing(case, layout: str, unsafe: bool) -> None:
    original = case.path.read_bytes()
    mutate = LAYOUTS[layout]
    mutated = mutate(original)
    shift = _SHIFT.get(layout, 0)
    expected = [
        (code, line + shift, message) for code, line, message in _findings(original, case, unsafe)
    ]
    assert _findings(mutated, case, unsafe) == expected
    fixed = _fixed(mutated, case, unsafe)
    assert fixed == mutate(_fixed(original, case, unsafe))
    check(mutated, settings_for(case.path, unsafe=unsafe), str(case.path))


@settings(max_examples=examples(0.3))
@given(st.data(), st.sampled_from(CASES), st.booleans())
def test_inserted_blank_and_comment_lines_move_the_findings_only(
    data: st.DataObject, case, unsafe: bool
) -> None:
    original = case.path.read_bytes()
    mutated, mapping = data.draw(mutations.inserted_lines(original))
    expected = sorted(
        (code, mapping[line], message) for code, line, message in _findings(original, case, unsafe)
    )
    assert _findings(mutated, case, unsafe) == expected
    before = check(original, settings_for(case.path, unsafe=unsafe), str(case.path))
    after = check(mutated, settings_for(case.path, unsafe=unsafe), str(case.path))
    assert after.applied == before.applied


@settings(max_examples=examples(0.5))
@given(st.data(), st.sampled_from(CASES), st.booleans())
def test_content_mutations_keep_the_invariants(data: st.DataObject, case, unsafe: bool) -> None:
    source = case.path.read_bytes()
    if data.draw(st.booleans(), label="rename"):
        source = data.draw(mutations.renamed(source))
    if data.draw(st.booleans(), label="renumber"):
        source = data.draw(mutations.renumbered(source))
    layout = data.draw(st.sampled_from(["none", *sorted(LAYOUTS)]), label="layout")
    if layout != "none":
        source = LAYOUTS[layout](source)
    assume(source != b"")
    check(source, settings_for(case.path, unsafe=unsafe), str(case.path))


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"], ids=["crlf", "cr"])
def test_every_fixture_says_the_same_with_other_line_endings(newline: bytes) -> None:
    # The sampled test above draws a few fixtures; a message that quotes source code (a
    # loop's header) must not carry a line ending in any of them.
    for case in CASES:
        original = case.path.read_bytes()
        mutated = mutations.with_newline(original, newline)
        assert _findings(mutated, case, True) == _findings(original, case, True), case.path
