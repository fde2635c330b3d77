"""Generated SWA training scripts report exactly the bugs injected into them (EMA401-406).

Each script (``swa_scripts.py``) is an SWA run in one of the real shapes: torch's
``swa_utils`` under any spelling, in a function or a ``Trainer`` class, or Lightning's
``StochasticWeightAveraging`` callback. It carries zero or more bugs from
``swa_injectors.py``, one per slot. The findings must be exactly the injected bugs, at
their lines (100% precision and recall); ``--fix`` must remove every fixable one (safe
ones with ``--fix``, unsafe ones too with ``--unsafe-fixes``), leave the others, and keep
the invariants of ``tests/properties/invariants.py``. The counts join the shared tally.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fixture_cases import all_cases, settings_for
from tests.generated.harness import assert_exactly_the_injected_bugs
from tests.generated.scripts import Script
from tests.generated.swa_injectors import CLEAN, INJECTORS, SLOTS
from tests.generated.swa_scripts import plans, render
from tests.profiles import examples
from tests.properties.invariants import check


@st.composite
def scripts(draw) -> Script:
    """A plan, then for each slot in order a bug that suits the plan so far, or a clean
    variant (the slots constrain each other through ``when``)."""
    plan = draw(plans())
    # About one script in six is clean throughout (precision on legitimate SWA code).
    clean = draw(st.sampled_from([*[False] * 5, True]), label="clean script")
    for slot in SLOTS:
        bugs = [i for i in INJECTORS if i.slot == slot and i.when(plan) and not clean]
        # Each bug of the slot as likely as all its clean variants together.
        bug = draw(st.sampled_from([*bugs, None]), label=f"{slot}: bug") if bugs else None
        if bug is not None:
            bug.apply(plan, draw)
        else:
            cleans = [c for c in CLEAN if c.slot == slot and c.when(plan)]
            draw(st.sampled_from(cleans), label=f"{slot}: clean").apply(plan, draw)
    return render(plan)


@settings(max_examples=examples(0.6))
@given(scripts())
def test_generated_swa_scripts_report_exactly_their_bugs_and_fix_them(script: Script) -> None:
    assert_exactly_the_injected_bugs(script)


SWA_CASES = [case for case in all_cases() if case.rule_code.startswith("EMA4")]


@pytest.mark.parametrize("case", SWA_CASES, ids=lambda case: f"{case.rule_code}/{case.path.name}")
def test_swa_fixtures_keep_the_fix_invariants(case) -> None:
    # The generated scripts found EMA401/402/404 fixes editing lines outside their declared
    # fix scope (update_bn inserted or moved after the loop, a start literal edited where
    # it is defined); the fixtures hold every SWA fix to the invariants, deterministically.
    data = case.path.read_bytes()
    for unsafe in (False, True):
        check(data, settings_for(case.path, unsafe=unsafe), str(case.path))
