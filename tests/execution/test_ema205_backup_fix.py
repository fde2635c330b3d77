"""The EMA205 fix of a backup by reference, run: the fixed backup is a copy, so the live
weights come back after the averaged ones are evaluated; the original "restores" the
averaged weights and training goes on from them."""

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
Y = X @ torch.tensor([1.0, -2.0, 0.5, 3.0])
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=16)

model = nn.Linear(4, 1)
ema_model = copy.deepcopy(model).requires_grad_(False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
live_before_eval = []
live_after_eval = []

for epoch in range(3):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.5).add_(p, alpha=0.5)
    live_before_eval.append(model.weight.detach().clone())
    saved = model.state_dict()
    model.load_state_dict(ema_model.state_dict())
    model.eval()
    with torch.no_grad():
        val_loss = nn.functional.mse_loss(model(X).squeeze(1), Y)
    model.load_state_dict(saved)
    live_after_eval.append(model.weight.detach().clone())

torch.save(
    {
        "before": torch.stack(live_before_eval),
        "after": torch.stack(live_after_eval),
        "ema": ema_model.state_dict(),
    },
    __file__ + ".pt",
)
"""


def _run(path: Path) -> dict:
    runpy.run_path(str(path), run_name="__main__")
    return torch.load(str(path) + ".pt")


def test_fixed_backup_restores_the_live_weights(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    # A fast average for a run of a few steps: its decay is not what is tested (EMA101).
    overrides = Overrides(ignore=["EMA101"])
    settings = Settings(overrides, isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA205"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "saved = model.state_dict()" not in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    # The symptom: after each evaluation the live model holds the averaged weights.
    assert not torch.equal(before["before"][0], before["after"][0])
    assert torch.equal(before["after"][-1], before["ema"]["weight"])
    # Fixed: the live weights are back after every evaluation.
    assert torch.equal(after["before"], after["after"])
    assert engine.lint(fixed_text, str(fixed), settings) == []


def test_fixed_tensor_backup_restores_the_live_weights(tmp_path: Path) -> None:
    """The same bug written with the tensors themselves: ``[p.data for p in ...]`` keeps
    references, so copying the average in also overwrites the backup."""
    script = SCRIPT.replace(
        "    saved = model.state_dict()\n    model.load_state_dict(ema_model.state_dict())\n",
        "    saved = [p.data for p in model.parameters()]\n"
        "    with torch.no_grad():\n"
        "        for p, e in zip(model.parameters(), ema_model.parameters()):\n"
        "            p.copy_(e)\n",
    ).replace(
        "    model.load_state_dict(saved)\n",
        "    with torch.no_grad():\n"
        "        for p, b in zip(model.parameters(), saved):\n"
        "            p.copy_(b)\n",
    )
    assert script != SCRIPT and "p.data for p" in script
    original = tmp_path / "train.py"
    original.write_text(script, encoding="utf-8")
    overrides = Overrides(ignore=["EMA101"])
    settings = Settings(overrides, isolated=True).for_file(original)
    assert [d.code for d in engine.lint(script, str(original), settings)] == ["EMA205"]
    fixed_text = engine.fix(script, str(original), settings).fixed
    assert "p.data.clone() for p" in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    assert torch.equal(before["after"][-1], before["ema"]["weight"])
    assert torch.equal(after["before"], after["after"])
    assert engine.lint(fixed_text, str(fixed), settings) == []
