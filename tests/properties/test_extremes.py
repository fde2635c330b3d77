"""Extreme numbers and YAML alias graphs: never a crash, a hang or an unbounded expansion."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ema_lint.engine import FileSettings
from ema_lint.sources import yaml_config, yaml_nodes
from tests.profiles import examples
from tests.properties.extremes import (
    NUMBER_TEMPLATES,
    AliasGraph,
    alias_graph,
    extreme_number,
    merge_graph,
)
from tests.properties.invariants import check, file_settings


@settings(max_examples=examples(0.5))
@given(st.sampled_from(NUMBER_TEMPLATES), extreme_number(), st.booleans())
def test_extreme_numbers_keep_the_invariants(template: str, number: str, unsafe: bool) -> None:
    source = template.format(v=number).encode()
    check(source, file_settings(unsafe=unsafe), "train.py")  # no EMA902/903, fixes sound


def _yaml_settings() -> FileSettings:
    return file_settings(unsafe=True)


@settings(max_examples=examples(0.5))
@given(alias_graph())
def test_alias_graphs_are_read_or_refused_by_their_expanded_size(graph: AliasGraph) -> None:
    data = graph.text.encode()
    outcome = yaml_config.SOURCE.lint(data, "c.yaml", _yaml_settings())
    codes = [d.code for d in outcome.diagnostics]
    assert "EMA902" not in codes and "EMA903" not in codes
    if graph.expanded > yaml_nodes.MAX_EXPANDED_NODES:
        [refusal] = outcome.diagnostics
        assert refusal.code == "EMA901" and "nodes once its aliases are expanded" in refusal.message
        return
    assert "EMA901" not in codes, outcome.diagnostics
    expected = [] if graph.target == "0.9999" else ["EMA101"]
    assert [c for c in codes if c == "EMA101"][:1] == expected
    assert codes.count("EMA101") <= 1  # one finding where the value is written
    fixed = yaml_config.SOURCE.fix(data, "c.yaml", _yaml_settings())
    if fixed.fixed is not None:
        again = yaml_config.SOURCE.fix(fixed.fixed, "c.yaml", _yaml_settings())
        assert again.fixed is None, "fixing is not idempotent"
        # only the anchored scalar changed: every other line is kept
        before, after = graph.text.splitlines(), fixed.fixed.decode().splitlines()
        assert [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b] == [
            before.index(f"d: &d {graph.target}")
        ]


@settings(max_examples=examples(0.5))
@given(merge_graph())
def test_merge_keys_follow_yamls_precedence(case: tuple[str, dict[str, int]]) -> None:
    text, expected = case
    [document] = yaml_nodes.load(text)
    assert dict(document["out"]) == expected
    for key in expected:  # each merged key points at the text that wrote its value
        span = document["out"].value_spans[key]
        assert text[span.start : span.end] == str(expected[key])
