"""The EMA301 fix, run: the fixed update writes the average into the copy's tensors; the
original rebinds a name and leaves the copy at the initial weights."""

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
X = torch.randn(64, 4)
Y = X @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 1.0
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)

model = nn.Linear(4, 1)
ema_model = copy.deepcopy(model).requires_grad_(False)
initial = copy.deepcopy(model.state_dict())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(5):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e = 0.8 * e + 0.2 * p

torch.save(
    {"ema": ema_model.state_dict(), "model": model.state_dict(), "initial": initial},
    __file__ + ".pt",
)
"""


def _run(path: Path) -> dict:
    runpy.run_path(str(path), run_name="__main__")
    return torch.load(str(path) + ".pt")


def test_fixed_update_moves_the_average(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    # A fast average for a run of a few steps: its decay is not what is tested (EMA101,
    # which judges the update once the fix makes it one).
    settings = Settings(Overrides(ignore=["EMA101"]), isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA301"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "e = 0.8 * e + 0.2 * p" not in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    # The symptom: the "average" never left the initial weights.
    for key in ("weight", "bias"):
        assert torch.equal(before["ema"][key], before["initial"][key]), key
    # Fixed: the average moved from the initial weights to near the trained ones.
    gap_initial = (after["ema"]["weight"] - after["initial"]["weight"]).abs().max().item()
    gap_live = (after["ema"]["weight"] - after["model"]["weight"]).abs().max().item()
    assert gap_initial > 0.5, gap_initial
    assert gap_live < gap_initial / 4, (gap_live, gap_initial)
    assert engine.lint(fixed_text, str(fixed), settings) == []
