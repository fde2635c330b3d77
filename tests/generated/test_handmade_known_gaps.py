"""Hand-made EMA shapes the generated scripts answer wrongly, kept out of the generator.

Each test is a strict ``xfail``: it documents the wrong answer in the smallest script that
shows it, and it turns into a failure (an unexpected pass) the day the analysis is fixed,
so the shape can then go into ``handmade_scripts.py`` (an EMA101/EMA102 injector on the
hand-made decay).
"""

from __future__ import annotations

import pytest

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


@pytest.mark.xfail(
    strict=True,
    reason="EMA101 reads the decays of averaging APIs only (analysis/decays.py): the decay "
    "of a hand-made update of a deepcopy, here 0.9 (about 10 updates), is not judged",
)
def test_a_hand_made_decay_too_low_is_reported() -> None:
    assert _codes(HAND_MADE.format(decay="0.9")) == ["EMA101"]


@pytest.mark.xfail(
    strict=True,
    reason="EMA102 reads the decays of averaging APIs only (analysis/decays.py): a hand-made "
    "update with a decay of 1.5 (outside [0, 1], the average diverges) is not judged",
)
def test_a_hand_made_decay_outside_zero_one_is_reported() -> None:
    assert _codes(HAND_MADE.format(decay="1.5")) == ["EMA102"]
