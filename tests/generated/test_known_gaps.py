"""Shapes the generated scripts found wrong: open ones, which the generator avoids, and fixed
ones, kept as regression tests.

An open gap is a strict ``xfail``: it documents the wrong answer in the smallest script that
shows it, and it turns into a failure (an unexpected pass) the day the analysis is fixed,
so the shape can then go back into ``scripts.py`` and the test loses its mark.
"""

from __future__ import annotations

import pytest

from ema_lint import engine
from tests.properties.invariants import file_settings

ACCUMULATED = """
import torch
from timm.utils import ModelEmaV2

ACCUM = 8


def train(model, loader):
    {opt} = torch.optim.SGD(model.parameters(), lr=0.1)
    ema = ModelEmaV2(model, decay=0.9998)
    for step, batch in enumerate(loader):
        model(batch).mean().backward()
        if (step + 1) % ACCUM == 0:
            {opt}.step()
            {opt}.zero_grad()
            ema.update(model)
"""


def _codes(source: str) -> list[str]:
    return [d.code for d in engine.lint(source, "train.py", file_settings(unsafe=True))]


def test_an_optimizer_named_optimizer_is_recognised_under_accumulation() -> None:
    # The update runs once per optimizer step: a per-step decay of 0.9998, in range.
    assert _codes(ACCUMULATED.format(opt="optimizer")) == []


@pytest.mark.parametrize("name", ["sgd", "adamw", "solver", "bar"])
def test_an_optimizer_with_another_name_is_recognised_under_accumulation(name: str) -> None:
    # Fixed: the optimizer is known by where it was made (analysis/objects/optimizers.py), not by
    # its name, so the guard is not taken for an update interval of 8 (EMA101 reported a
    # per-step decay of 0.999975).
    assert _codes(ACCUMULATED.format(opt=name)) == []
