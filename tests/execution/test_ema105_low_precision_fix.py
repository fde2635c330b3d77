"""The EMA105 fix of an average cast to float16, run: in half precision each update of
``(1 - decay) * (weights - average)`` is below the resolution of the average and rounds
away, so the original average never leaves its initial weights; the fixed float32 average
follows the exact EMA of the weights the training went through."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from ema_lint import engine
from ema_lint.config import Overrides, Settings

torch = pytest.importorskip("torch")

SCRIPT = """
import copy

import torch
from torch import nn

torch.manual_seed(0)
X = torch.randn(128, 4)
Y = X @ torch.tensor([3.0, -2.0, 2.5, 1.5])
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)

model = nn.Linear(4, 1)
with torch.no_grad():
    model.weight.fill_(1.0)
    model.bias.fill_(1.0)
ema_model = copy.deepcopy(model).requires_grad_(False)
ema_model.to(dtype=torch.float16)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
history = []

for epoch in range(4):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.9999).add_(p, alpha=0.0001)
        history.append(model.weight.detach().clone())

torch.save({"history": history, "ema": ema_model.weight.detach().clone()}, __file__ + ".pt")
"""


def _run(path: Path) -> dict:
    runpy.run_path(str(path), run_name="__main__")
    return torch.load(str(path) + ".pt")


def _exact(history: list) -> object:
    """The EMA of the weights after each step, in float64 from the same start."""
    average = torch.ones_like(history[0], dtype=torch.float64)
    for weights in history:
        average = 0.9999 * average + 0.0001 * weights.double()
    return average


def test_fixed_average_moves_with_the_weights(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    # A short run: the horizon of the decay is not what is tested (EMA101).
    settings = Settings(Overrides(ignore=["EMA101"]), isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA105"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "float16" not in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    exact = _exact(before["history"])
    start = torch.ones_like(exact)
    assert (exact - start).abs().min() > 1e-4  # the exact average did move
    # The symptom: the float16 average never left its initial weights.
    assert before["ema"].dtype == torch.float16
    assert torch.equal(before["ema"].double(), start)
    # Fixed: a float32 average that follows the exact one.
    assert after["ema"].dtype == torch.float32
    assert torch.allclose(after["ema"].double(), _exact(after["history"]), rtol=0, atol=1e-6)
    assert engine.lint(fixed_text, str(fixed), settings) == []
