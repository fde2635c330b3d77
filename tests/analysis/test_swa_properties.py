"""The start of SWA read from a loop condition agrees with running the loop, and the start
setting the fix writes begins averaging at the fraction asked for (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ema_lint.analysis.training.swa import SwaAnalysis
from tests.analysis.helpers import context

CONDITIONS = {
    "epoch >= S": lambda e, s: e >= s,
    "epoch > S": lambda e, s: e > s,
    "epoch + 1 >= S": lambda e, s: e + 1 >= s,
    "S <= epoch": lambda e, s: s <= e,
    "S < epoch + 1": lambda e, s: s < e + 1,
}


def _source(condition: str, start: int, first_epoch: int, epochs: int) -> str:
    return (
        "from torch.optim.swa_utils import AveragedModel\n"
        f"S = {start}\n"
        f"EPOCHS = {epochs}\n"
        "swa = AveragedModel(model)\n"
        f"for epoch in range({first_epoch}, EPOCHS):\n"
        "    train(model)\n"
        f"    if {condition}:\n"
        "        swa.update_parameters(model)\n"
    )


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(sorted(CONDITIONS)),
    st.integers(min_value=2, max_value=400),
    st.integers(min_value=0, max_value=1),
    st.data(),
)
def test_start_matches_the_loop_and_the_fix_lands_at_three_quarters(
    condition: str, epochs: int, first_epoch: int, data: st.DataObject
) -> None:
    start = data.draw(st.integers(min_value=0, max_value=epochs - 1))
    swa = context(_source(condition, start, first_epoch, epochs)).get(SwaAnalysis)
    [site] = swa.models[0].sites
    found = swa.start(site)
    assert found is not None
    holds = CONDITIONS[condition]
    averaged = [e for e in range(first_epoch, epochs) if holds(e, start)]
    expected_first = (averaged[0] - first_epoch) if averaged else epochs - first_epoch
    assert found.first == max(expected_first, 0)
    assert found.length == epochs - first_epoch

    new = int(found.setting_for(0.75))
    again = context(_source(condition, new, first_epoch, epochs)).get(SwaAnalysis)
    refound = again.start(again.models[0].sites[0])
    assert refound is not None
    assert abs(refound.first - 0.75 * found.length) <= 1
