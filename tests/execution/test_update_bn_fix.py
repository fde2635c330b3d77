"""The EMA401 fix, run: the fixed script's SWA model has BatchNorm statistics recomputed for
the averaged weights, the original's are the live model's copies."""

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
from torch.optim.swa_utils import AveragedModel, SWALR

torch.manual_seed(0)
X = torch.randn(128, 8)
Y = (X[:, 0] + 0.5 * X[:, 1] > 0).long()
train_loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(X, Y), batch_size=32, shuffle=False
)

model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
swa_model = AveragedModel(model)
swa_scheduler = SWALR(optimizer, swa_lr=0.2, anneal_epochs=1)
EPOCHS = 6
SWA_START = 3

for epoch in range(EPOCHS):
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    if epoch >= SWA_START:
        swa_model.update_parameters(model)
        swa_scheduler.step()

torch.save(swa_model.state_dict(), __file__ + ".pt")
"""


def _run(path: Path) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: threads only add overhead
    try:
        runpy.run_path(str(path), run_name="__main__")
    finally:
        torch.set_num_threads(threads)
    return torch.load(str(path) + ".pt")


def test_fixed_script_recalibrates_the_averaged_batch_norm(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    settings = Settings(isolated=True).for_file(original)
    findings = engine.lint(SCRIPT, str(original), settings)
    assert [d.code for d in findings] == ["EMA401"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "torch.optim.swa_utils.update_bn(train_loader, swa_model)" in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    # Same training, same averaged weights: only the BatchNorm buffers differ.
    for key in ("module.0.weight", "module.0.bias", "module.3.weight", "n_averaged"):
        assert torch.equal(before[key], after[key]), key
    # What the BatchNorm layer should have seen: the averaged first layer's outputs over
    # the training data (4 equal batches: the cumulative mean of batch means).
    with torch.no_grad():
        torch.manual_seed(0)
        x = torch.randn(128, 8)
        expected = (x @ after["module.0.weight"].T + after["module.0.bias"]).mean(0)
    assert torch.allclose(after["module.1.running_mean"], expected, atol=1e-5)
    assert int(after["module.1.num_batches_tracked"]) == 4
    # The original kept the live model's statistics, copied at the last update.
    gap = (before["module.1.running_mean"] - expected).abs().max().item()
    assert gap > 1e-2, gap
    assert fixed_text != SCRIPT and engine.lint(fixed_text, str(fixed), settings) == []
