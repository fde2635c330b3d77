"""The rule manifest: it says what the rule classes say, so the cheap paths built on it
(selection, option validation, the pre-filter, the cache key, the flake8 flags) agree with
the rules themselves."""

from __future__ import annotations

from ema_lint import manifest, registry
from ema_lint.manifest import REGENERATE, RuleInfo, render
from ema_lint.prefilter import PreFilter, component, identifier
from ema_lint.rule import Option, Rule


def test_the_manifest_equals_the_registered_rules() -> None:
    # Compared as generated text: a trigger's kind (bytes, identifier, component) counts.
    stale = render(manifest.load()) != render(manifest.live())
    assert not stale, f"ema_lint/_manifest.py is stale: run `{REGENERATE}` and commit it"


def test_the_checked_in_file_is_what_the_generator_writes() -> None:
    text = manifest.MANIFEST_PATH.read_text(encoding="utf-8")
    assert text == render(manifest.live()), f"run `{REGENERATE}` and commit the result"


def test_check_mode_reports_a_stale_manifest(monkeypatch, capsys) -> None:
    assert manifest.main(["--check"]) == 0
    monkeypatch.setattr(manifest, "load", lambda: manifest.live()[1:])
    assert manifest.main(["--check"]) == 1
    assert REGENERATE in capsys.readouterr().err


class _Sample(Rule):
    code = "EMA097"
    name = "sample-rule"
    summary = "a rule for the manifest's round trip"
    default_enabled = False
    triggers = (b"update_bn", identifier("EMA"), component("ema"))
    trigger_groups = (((b"parameters", identifier("lerp_")), (component("swa"),)),)
    options = (
        Option("min", float, 0.9, 'a "quoted" description'),
        Option("names", list, ["a", "b"], "names"),
    )


def test_an_entry_round_trips_through_the_generated_text() -> None:
    text = render((RuleInfo.of(_Sample),))
    namespace: dict[str, object] = {}
    module = text.replace("from .", "from ema_lint.")
    exec(compile(module, "<manifest>", "exec"), namespace)
    (entry,) = namespace["RULES"]  # type: ignore[misc]
    assert render((entry,)) == text
    assert [type(t).__name__ for t in entry.triggers] == ["bytes", "Identifier", "Component"]
    assert entry.options == _Sample.options and not entry.default_enabled
    # The pre-filter built from the entry is the one built from the class.
    assert PreFilter([entry]).fingerprint == PreFilter([_Sample]).fingerprint


def test_selection_and_defaults_come_from_the_manifest() -> None:
    codes = {entry.code for entry in manifest.load()}
    assert registry.expand("ALL") == codes
    assert registry.default_codes() == {r.code for r in registry.all_rules() if r.default_enabled}
    entry = registry.info("ema-decay-out-of-range")
    assert entry is not None and entry is registry.info("ema101")
    assert registry.lookup("EMA101").code == entry.code  # type: ignore[union-attr]
