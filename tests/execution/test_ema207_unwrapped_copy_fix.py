"""The EMA207 fix of an average copied from a DataParallel model, run on the CPU (where
DataParallel just calls its module): the original average is a DataParallel itself, its
state_dict keys carry ``module.`` and do not load into the bare model; the fixed one is
a copy of the bare model, whose averaged weights load into it."""

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
model = nn.DataParallel(model)
ema_model = copy.deepcopy(model).requires_grad_(False)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x).squeeze(1), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.5).add_(p, alpha=0.5)

torch.save({"kind": type(ema_model).__name__, "ema": ema_model.state_dict()}, __file__ + ".pt")
"""


def _run(path: Path) -> dict:
    runpy.run_path(str(path), run_name="__main__")
    return torch.load(str(path) + ".pt")


def test_fixed_copy_is_of_the_bare_model(tmp_path: Path) -> None:
    original = tmp_path / "train.py"
    original.write_text(SCRIPT, encoding="utf-8")
    # A fast average for a run of a few steps: its decay is not what is tested (EMA101).
    settings = Settings(Overrides(ignore=["EMA101"]), isolated=True).for_file(original)
    assert [d.code for d in engine.lint(SCRIPT, str(original), settings)] == ["EMA207"]
    fixed_text = engine.fix(SCRIPT, str(original), settings).fixed
    assert "copy.deepcopy(model.module)" in fixed_text
    fixed = tmp_path / "train_fixed.py"
    fixed.write_text(fixed_text, encoding="utf-8")

    before = _run(original)
    after = _run(fixed)

    bare = torch.nn.Linear(4, 1)
    # The symptom: the average is a DataParallel, its keys carry the wrapper's prefix and
    # do not load into the bare model.
    assert before["kind"] == "DataParallel"
    assert sorted(before["ema"]) == ["module.bias", "module.weight"]
    with pytest.raises(RuntimeError):
        bare.load_state_dict(before["ema"])
    # Fixed: a copy of the bare model with the same averaged weights, which loads.
    assert after["kind"] == "Linear"
    assert sorted(after["ema"]) == ["bias", "weight"]
    bare.load_state_dict(after["ema"])
    assert torch.equal(after["ema"]["weight"], before["ema"]["module.weight"])
    assert engine.lint(fixed_text, str(fixed), settings) == []
