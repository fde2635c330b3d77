"""The shapes a rule's docs show: each reported example triggers the rule, each silent one
does not."""

from __future__ import annotations

import pytest

from ema_lint import docs, engine, registry
from ema_lint.config import Settings

SHAPES = [
    (rule, title, bad, good)
    for rule in registry.all_rules()
    for title, bad, good in docs.shape_examples(rule)
]


def test_the_loop_rules_document_their_shapes() -> None:
    documented = {rule.code for rule, *_ in SHAPES}
    assert {"EMA202", "EMA203"} <= documented


@pytest.mark.parametrize(
    ("rule", "title", "bad", "good"), SHAPES, ids=[f"{r.code}-{t}" for r, t, _, _ in SHAPES]
)
def test_shape_example_is_reported_and_its_correct_form_is_silent(rule, title, bad, good) -> None:
    settings = Settings(isolated=True).for_file(None)
    bad_codes = [d.code for d in engine.lint(bad, "bad.py", settings)]
    good_codes = [d.code for d in engine.lint(good, "good.py", settings)]
    assert rule.code in bad_codes, f"{rule.code} {title!r}: the reported form is silent"
    assert rule.code not in good_codes, f"{rule.code} {title!r}: the correct form is reported"
