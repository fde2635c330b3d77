"""Hand-made EMA shapes the generated scripts once answered wrongly, in their smallest form.

A shape the analysis gets wrong is kept here as a strict ``xfail`` (it turns into a failure
the day the analysis is fixed, and then goes into ``handmade_scripts.py``). The decay of a
hand-made update was one: EMA101/EMA102 now judge it (``analysis/training/decays.py``), and the
generated scripts inject it (``handmade_injectors.py``); these tests keep the smallest case.
"""

from __future__ import annotations

from ema_lint import engine
from tests.properties.invariants import file_settings

HAND_MADE = """
import copy

import torch

EMA_DECAY = {decay}


def train(model, loader, optimizer):
    ema = copy.deepcopy(model).requires_grad_(False)
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(EMA_DECAY).add_(p, alpha=1 - EMA_DECAY)
    return ema
"""


def _codes(source: str) -> list[str]:
    return [d.code for d in engine.lint(source, "train.py", file_settings(unsafe=True))]


def test_a_hand_made_update_with_a_decay_in_range_is_silent() -> None:
    assert _codes(HAND_MADE.format(decay="0.9998")) == []


def test_a_hand_made_decay_too_low_is_reported() -> None:
    assert _codes(HAND_MADE.format(decay="0.9")) == ["EMA101"]


def test_a_hand_made_decay_outside_zero_one_is_reported() -> None:
    assert _codes(HAND_MADE.format(decay="1.5")) == ["EMA102"]
