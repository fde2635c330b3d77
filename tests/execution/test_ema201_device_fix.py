"""The EMA201 fix of an average put on the CPU, run. Its symptom (a blocking copy from
the accelerator to the host on every update) needs an accelerator: without one this only
shows that the fixed script runs, averages exactly the same weights, and keeps the copy
on the model's device; with CUDA it also shows the original copy was not there."""

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

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.manual_seed(0)
X = torch.randn(64, 4)
Y = X @ torch.tensor([1.0, -2.0, 0.5, 3.0])
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)

model = nn.Linear(4, 1).to(device)
ema_model = copy.deepcopy(model).cpu().requires_grad_(False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(3):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.5).add_(p.to(e.device), alpha=0.5)

torch.save(
    {
        "ema": {k: v.cpu() for k, v in ema_model.state_dict().items()},
        "ema_device": str(next(ema_model.parameters()).device),
        "model_device": str(next(model.parameters()).device),
    },
    __file__ + ".pt",
)
"""


def _run(path: Path) -> dict:
    runpy.run_path(str(path), run_name="__main__")
    return torch.load(str(path) + ".pt")


def test_fixed_copy_stays_on_the_model_device(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    # A fast average for a run of a few steps: its decay is not what is tested (EMA101).
    settings = Settings(Overrides(ignore=["EMA101"]), isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA201"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert ".cpu().requires_grad_" not in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    assert before["ema_device"] == "cpu"
    if torch.cuda.is_available():  # the symptom, where there is an accelerator
        assert before["ema_device"] != before["model_device"]
    # Fixed: the copy is where the model is, and the averaged weights are unchanged.
    assert after["ema_device"] == after["model_device"]
    for key, value in before["ema"].items():
        assert torch.allclose(after["ema"][key], value)
    assert engine.lint(fixed_text, str(fixed), settings) == []
