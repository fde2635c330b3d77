"""The EMA407 fix, run: the fixed recalibration moves the BatchNorm statistics to those of
the data; the original leaves them at their reset values."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from ema_lint import engine
from ema_lint.config import Settings

torch = pytest.importorskip("torch")

SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
X = torch.randn(64, 4) * 3 + 5
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X), batch_size=16)
model = nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 1))


def bn_update(loader, model):
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = 0.0
    model.train()
    with torch.no_grad():
        for (x,) in loader:
            model(x)


bn_update(loader, model)
torch.save(model.state_dict(), __file__ + ".pt")
"""


def _run(path: Path) -> dict:
    runpy.run_path(str(path), run_name="__main__")
    return torch.load(str(path) + ".pt")


def test_fixed_recalibration_moves_the_statistics(tmp_path: Path) -> None:
    original = tmp_path / "recalibrate.py"
    original.write_text(SCRIPT, encoding="utf-8")
    settings = Settings(isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA407"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "module.momentum = None" in fixed_text
    fixed = tmp_path / "recalibrate_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    torch.manual_seed(0)
    data = torch.randn(64, 4) * 3 + 5
    # The symptom: statistics frozen at their reset values (mean 0, variance 1).
    assert torch.equal(before["0.running_mean"], torch.zeros(4))
    assert torch.equal(before["0.running_var"], torch.ones(4))
    # Fixed: the cumulative average of the batch means is the data's mean.
    assert torch.allclose(after["0.running_mean"], data.mean(0), atol=1e-4)
    assert after["0.running_var"].min() > 4
