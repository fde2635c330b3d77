"""Every fixture case, through the engine: exact findings, exact fixes, idempotent, parses."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint import registry
from tests.fixture_cases import Case, all_cases, fix_file, fixable, lint_file, matches

CASES = all_cases()


def test_there_are_cases_for_every_rule() -> None:
    covered = {case.rule_code for case in CASES}
    missing = [
        rule.code
        for rule in registry.all_rules()
        if rule.code not in covered and not getattr(rule, "internal", False)
    ]
    assert not missing, f"rules without fixtures: {missing}"


def test_every_visitor_rule_has_a_silent_case() -> None:
    silent = {case.rule_code for case in CASES if not case.expected()}
    missing = [
        rule.code
        for rule in registry.all_rules()
        if not getattr(rule, "internal", False) and rule.code not in silent
    ]
    assert not missing, f"rules without a case that must stay silent: {missing}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_findings_are_exactly_the_expected_ones(case: Case) -> None:
    found = lint_file(case.path)
    missing, unexpected = matches(case.expected(), found)
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"


@pytest.mark.parametrize("unsafe", [False, True], ids=["fix", "unsafe-fixes"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fix_output(case: Case, unsafe: bool) -> None:
    original = case.path.read_bytes()
    outcome = fix_file(case.path, unsafe=unsafe)
    expected_path = case.unsafe_path if unsafe else case.fixed_path
    if unsafe and not expected_path.exists():
        found = lint_file(case.path)
        if not [d for d in fixable(found, True) if d not in fixable(found, False)]:
            # Only safe fixes: --unsafe-fixes must produce the same output as --fix.
            expected_path = case.fixed_path
    if expected_path.exists():
        expected = expected_path.read_bytes()
        assert outcome.fixed == expected, (
            f"fix output differs from {expected_path.name}:\n{outcome.fixed.decode()}"
        )
    else:
        assert not fixable(lint_file(case.path), unsafe), (
            f"{case.id} has fixable findings but no {expected_path.name}"
        )
        assert outcome.fixed == original, "a file with nothing to fix must come back unchanged"
    assert not [d for d in outcome.diagnostics if d.code == "EMA903"]
    if outcome.changed:
        cst.parse_module(outcome.fixed)
        # Idempotent: fixing the fixed output changes nothing.
        again = fix_file(case.path, unsafe=unsafe, data=outcome.fixed)
        assert again.fixed == outcome.fixed
        # Nothing the fix was meant to remove is left.
        left = fixable(lint_file(case.path, outcome.fixed), unsafe)
        assert not left, [(d.code, d.line, d.message) for d in left]


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c.fixed_path.exists() or c.unsafe_path.exists()],
    ids=lambda c: c.id,
)
def test_expected_outputs_are_not_stale(case: Case) -> None:
    """A .fixed.py / .unsafe.py exists only when the case has something to fix."""
    found = lint_file(case.path)
    if case.fixed_path.exists():
        assert fixable(found, False), f"{case.fixed_path.name} exists but nothing is safely fixable"
    if case.unsafe_path.exists():
        assert [d for d in fixable(found, True) if d not in fixable(found, False)], (
            f"{case.unsafe_path.name} exists but no unsafe fix applies"
        )


@pytest.mark.parametrize("case", [c for c in CASES if c.expected()], ids=lambda c: c.id)
def test_prefilter_lets_every_case_with_a_finding_through(case: Case) -> None:
    """Each rule's own triggers admit every file it reports on (the pre-filter is sound)."""
    from ema_lint.prefilter import PreFilter

    data = case.path.read_bytes()
    for code in {code for code, _, _ in case.expected()}:
        rule = registry.by_code()[code]
        if getattr(rule, "internal", False):
            continue
        assert PreFilter([rule]).matches(data), f"{code}'s triggers do not match {case.id}"
