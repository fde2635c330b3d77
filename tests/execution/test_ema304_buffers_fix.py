"""The EMA304 fix, run: the fixed script's averaged copy carries the live model's BatchNorm
statistics; the original's stay those copied before training (mean 0, variance 1)."""

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
X = torch.randn(96, 4) * 2 + 3
Y = (X[:, 0] > 3).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)

model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
ema_model = copy.deepcopy(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(3):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)
    ema_model.eval()
    with torch.no_grad():
        accuracy = (ema_model(X).argmax(1) == Y).float().mean()

torch.save({"ema": ema_model.state_dict(), "model": model.state_dict()}, __file__ + ".pt")
"""


def _run(path: Path) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only add overhead
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    return torch.load(str(path) + ".pt")


def test_fixed_average_keeps_the_batch_norm_statistics_current(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    # A fast average for a run of a few steps: its decay is not what is tested (EMA101).
    overrides = Overrides(unsafe_fixes=True, ignore=["EMA101"])
    settings = Settings(overrides, isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA304"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "ema_buffer.copy_(buffer)" in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    # Same training: the averaged parameters agree, only the buffers differ.
    for key in ("0.weight", "1.weight", "3.bias"):
        assert torch.equal(before["ema"][key], after["ema"][key]), key
    # The symptom: the copy's statistics are still those of the untrained model.
    assert torch.equal(before["ema"]["1.running_mean"], torch.zeros(8))
    assert torch.equal(before["ema"]["1.running_var"], torch.ones(8))
    assert int(before["ema"]["1.num_batches_tracked"]) == 0
    # Fixed: the copy's statistics follow the live model's.
    live = after["model"]
    for key in ("1.running_mean", "1.running_var", "1.num_batches_tracked"):
        assert torch.equal(after["ema"][key], live[key]), key
    assert after["ema"]["1.running_mean"].abs().max() > 0.1
    assert engine.lint(fixed_text, str(fixed), settings) == []
