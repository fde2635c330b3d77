"""The check every generated script goes through, whatever generator wrote it.

A script reports exactly its injected bugs at their lines (100% precision and recall), the
pre-filter lets it through when it has one (the union's, and each reported rule's alone),
every fix keeps the invariants of ``tests/properties/invariants.py``, and ``--fix`` (with
and without unsafe fixes) leaves exactly the bugs it cannot or may not fix. The counts go to
the shared tally.
"""

from __future__ import annotations

from typing import Protocol

from ema_lint import registry
from ema_lint.prefilter import PreFilter
from tests.generated.scripts import Bug
from tests.generated.tally import TALLY
from tests.properties.invariants import check, file_settings

SAFE = file_settings(unsafe=False)
UNSAFE = file_settings(unsafe=True)


class _Plan(Protocol):
    bugs: list[Bug]


class GeneratedScript(Protocol):
    source: str

    @property
    def plan(self) -> _Plan: ...

    def expected(self) -> list[tuple[str, int]]: ...


def numbered(source: str) -> str:
    """The source with line numbers, for failure messages."""
    return "\n".join(f"{i:4} {line}" for i, line in enumerate(source.splitlines(), start=1))


def assert_exactly_the_injected_bugs(script: GeneratedScript) -> None:
    data = script.source.encode()
    bugs = script.plan.bugs
    expected = script.expected()
    if bugs:
        assert PreFilter(UNSAFE.rules).matches(data), "the pre-filter skips a buggy script"
    for code in sorted({code for code, _ in expected}):
        # A run that selects only this rule filters with its triggers alone.
        rule = registry.by_code()[code]
        assert PreFilter([rule]).matches(data), f"{code}'s triggers skip a script it reports on"

    unsafe = check(data, UNSAFE, "train.py")  # also the invariants of every fix
    found = sorted((d.code, d.line) for d in unsafe.diagnostics)
    assert found == expected, f"expected {expected}, found {found}\n{numbered(script.source)}"

    runs = [(True, unsafe)]
    if any(bug.fix is not None for bug in bugs):
        runs.append((False, check(data, SAFE, "train.py")))
    for with_unsafe, checked in runs:
        left = sorted(d.code for d in checked.remaining)
        kept = sorted(
            bug.code for bug in bugs if bug.fix is None or (bug.fix == "unsafe" and not with_unsafe)
        )
        assert left == kept, (
            f"--fix{' --unsafe-fixes' if with_unsafe else ''} left {left}, expected {kept}\n"
            f"{numbered(script.source)}\n---- fixed:\n{numbered(checked.fixed.decode())}"
        )

    TALLY["scripts"] += 1
    TALLY["buggy"] += bool(bugs)
    TALLY["found"] += len(found)
    TALLY["matched"] += len(expected)
    TALLY["fixable"] += sum(bug.fix is not None for bug in bugs)
    TALLY["fixed"] += sum(bug.fix is not None for bug in bugs)
    for bug in bugs:
        TALLY[f"bug:{bug.code}"] += 1
