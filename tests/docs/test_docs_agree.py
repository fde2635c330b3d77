"""Docs, the registry, the README table and ``ema-lint explain`` say the same thing."""

from __future__ import annotations

import pytest

from ema_lint import docs, engine, registry
from ema_lint.config import Overrides, Settings
from tests.fixture_cases import ROOT

RULES = registry.all_rules()
SECTIONS = ("## What it finds", "## Fix")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_docs_page_is_generated_from_the_rule(rule) -> None:
    page = ROOT / "docs" / "rules" / f"{rule.code}.md"
    assert page.is_file(), f"missing {page}; run python -m ema_lint.docs"
    assert page.read_text(encoding="utf-8") == docs.page(rule, ROOT), (
        f"{page} is stale; run python -m ema_lint.docs"
    )


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_docs_have_the_required_sections(rule) -> None:
    text = rule.documentation()
    for heading in SECTIONS:
        assert heading in text, f"{rule.code} docs lack {heading!r}"
    if not getattr(rule, "internal", False):
        assert "## Why it hurts training" in text
        assert "## Example" in text and "## Use instead" in text


def test_no_page_without_a_rule() -> None:
    codes = {rule.code for rule in RULES}
    pages = {p.stem for p in (ROOT / "docs" / "rules").glob("EMA*.md")}
    assert pages == codes


def test_readme_table_matches_the_registry() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert docs.readme_with_table(readme) == readme, "README rules table is stale"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_explain_prints_the_rule_docs(rule, run) -> None:
    result = run("explain", rule.code)
    assert result.out == docs.render(rule)


@pytest.mark.parametrize(
    "rule", [r for r in RULES if not getattr(r, "internal", False)], ids=lambda r: r.code
)
def test_bad_example_triggers_the_rule_and_good_example_does_not(rule) -> None:
    bad, good = docs.examples(rule)
    assert bad is not None and good is not None
    # A rule that is off by default is selected, as its docs tell users to.
    settings = Settings(Overrides(extend_select=[rule.code]), isolated=True).for_file(None)
    bad_codes = {d.code for d in engine.lint(bad, "bad.py", settings)}
    good_codes = {d.code for d in engine.lint(good, "good.py", settings)}
    assert rule.code in bad_codes, f"the bad example of {rule.code} does not trigger it"
    assert rule.code not in good_codes, f"the good example of {rule.code} triggers it"


# The docs site ----------------------------------------------------------------------------
def test_generated_docs_are_fresh() -> None:
    for path, expected in docs.generated_files(ROOT).items():
        assert path.is_file(), f"missing {path}; run python -m ema_lint.docs"
        assert path.read_text(encoding="utf-8") == expected, (
            f"{path} is stale; run python -m ema_lint.docs"
        )


def test_configuration_reference_describes_every_key() -> None:
    from ema_lint import config

    assert set(docs.SETTINGS) == set(config._KNOWN_KEYS)
    reference = docs.configuration_reference()
    for rule in RULES:
        for option in rule.options:
            assert f"| `{option.name}` |" in reference
    assert "`--output-format`" in reference and "`--no-prefilter`" not in reference


def _nav_pages() -> set[str]:
    import re

    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    return set(re.findall(r"([\w./-]+\.md)\s*$", nav, flags=re.MULTILINE))


def test_every_page_is_in_the_site_navigation() -> None:
    pages = {
        p.relative_to(ROOT / "docs").as_posix()
        for p in (ROOT / "docs").rglob("*.md")
        if "evidence" not in p.relative_to(ROOT / "docs").parts
    }
    assert pages == _nav_pages()


def test_rules_index_links_every_rule() -> None:
    index = docs.rules_index()
    for rule in RULES:
        assert f"[{rule.code}](rules/{rule.code}.md)" in index


def test_included_evidence_links_are_made_relative_to_the_rule_page() -> None:
    text = "![p](plot.png) [s](../run_all.py) [w](https://x.org/a) [a](#top) [r](/abs)"
    assert docs._relink(text, "../evidence/EMA101/") == (
        "![p](../evidence/EMA101/plot.png) [s](../evidence/EMA101/../run_all.py) "
        "[w](https://x.org/a) [a](#top) [r](/abs)"
    )
