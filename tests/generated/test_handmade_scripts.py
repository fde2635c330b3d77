"""Generated training scripts with a hand-made EMA shadow report exactly their bugs.

The scripts (``handmade_scripts.py``) keep a ``deepcopy`` of the model current with the
project's own code, in every form real code writes it, and carry zero to three bugs from
``handmade_injectors.py`` (EMA301-EMA304). As for ``test_training_loops.py``: the findings
must be exactly the injected bugs, at their lines; the pre-filter must let every buggy
script through; ``--fix`` (and ``--unsafe-fixes``) must remove every fixable bug, leave the
others and keep the invariants of ``tests/properties/invariants.py``. The counts join the
shared tally printed in the terminal summary.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.generated.handmade_injectors import INJECTORS, SLOTS, Injector
from tests.generated.handmade_scripts import FORMS, HandScript, hand_plans, render
from tests.generated.harness import assert_exactly_the_injected_bugs
from tests.profiles import examples


@st.composite
def hand_scripts(draw) -> HandScript:
    """The bugs first (so that every injector is drawn about as often), each compatible
    with those chosen before it, then a plan in a form of the update that suits them all."""
    chosen: list[Injector] = []
    for slot in SLOTS:
        if draw(st.booleans(), label=f"{slot}: bug?"):
            bugs = [i for i in INJECTORS if i.slot == slot and i.fits(chosen)]
            if bugs:  # the rule first, then its shape: each rule as often as the others
                code = draw(st.sampled_from(sorted({i.code for i in bugs})), label=f"{slot}: rule")
                shapes = [i for i in bugs if i.code == code]
                chosen.append(draw(st.sampled_from(shapes), label=f"{slot}: bug"))
    forms = frozenset(FORMS).intersection(*(i.forms for i in chosen))
    assume(forms)
    plan = draw(hand_plans(forms))
    # The grad mode first: the update's statement reads the live weights as that mode does.
    for injector in sorted(chosen, key=lambda i: i.slot != "grad"):
        injector.apply(plan, draw)
    return render(plan)


# Each script is checked with and without unsafe fixes: 0.6 of the budget keeps it ~30 s.
@settings(max_examples=examples(0.6))
@given(hand_scripts())
def test_handmade_scripts_report_exactly_their_bugs_and_fix_them(script: HandScript) -> None:
    assert_exactly_the_injected_bugs(script)
