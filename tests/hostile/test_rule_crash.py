"""A rule that raises: EMA902 naming the rule and the file, the other findings kept, exit 2.

tests/engine/test_engine.py checks the isolation inside the engine; this drives the whole
command, with a crashing rule registered next to the real ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest

from ema_lint import registry
from ema_lint.manifest import RuleInfo
from ema_lint.rule import Rule
from tests.samples import BAD


class CrashesOnCalls(Rule):
    """A rule with a bug."""

    code = "EMA099"
    name = "test-crashes-on-calls"
    summary = "raises on every call"
    triggers = (b"ModelEmaV2",)

    def visit_Call(self, node: cst.Call) -> None:
        raise KeyError("missing-binding")


class CrashesInFinish(Rule):
    code = "EMA098"
    name = "test-crashes-in-finish"
    summary = "raises after visiting"
    triggers = (b"ModelEmaV2",)

    def finish(self) -> None:
        raise RecursionError("maximum recursion depth exceeded")


@pytest.fixture
def crashing_rules(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = registry.all_rules()
    extended = (*real, CrashesInFinish, CrashesOnCalls)
    for cached in (registry.by_code, registry.by_name):
        cached.cache_clear()
    monkeypatch.setattr(registry, "all_rules", lambda: extended)
    # Selection reads the rule manifest: the extra rules are registered there too.
    entries = tuple(RuleInfo.of(rule) for rule in extended)
    monkeypatch.setattr(registry, "infos", lambda: entries)
    yield
    monkeypatch.undo()
    for cached in (registry.by_code, registry.by_name):
        cached.cache_clear()


@pytest.mark.usefixtures("crashing_rules")
@pytest.mark.parametrize("fix", [False, True], ids=["check", "fix"])
def test_a_crashing_rule_is_reported_and_the_other_findings_are_kept(
    run, project: Path, fix: bool
) -> None:
    (project / "train.py").write_text(BAD)
    (project / "clean.py").write_text("x = 1\n")
    args = ["--fix", "--unsafe-fixes"] if fix else []
    result = run(*args, ".", cwd=project)
    assert result.code == 2, result.out
    assert "Traceback" not in result.out + result.err
    crashes = sorted(line for line in result.out.splitlines() if "EMA902" in line)
    assert len(crashes) == 2
    assert crashes[0].startswith("train.py:1:1: EMA902 rule EMA098 (test-crashes-in-finish)")
    assert "RecursionError: maximum recursion depth exceeded" in crashes[0]
    assert crashes[1].startswith("train.py:1:1: EMA902 rule EMA099 (test-crashes-on-calls)")
    assert "KeyError: 'missing-binding'" in crashes[1] and "please report this bug" in crashes[1]
    if fix:
        assert "decay=0.999)" in (project / "train.py").read_text()
    else:
        assert "train.py:3:31: EMA101" in result.out
    assert "clean.py" not in result.out
