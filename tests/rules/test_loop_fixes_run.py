"""The loop fixes change what training does, the way their docs say: run the fixtures.

Executes the EMA202 and EMA204 fixture cases and their expected fix outputs on a tiny
model (CPU torch): the EMA is updated once per optimizer step after the EMA202 fix, and
the averaged model is in eval mode when it is evaluated after the EMA204 fix.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.fixture_cases import FIXTURES

torch = pytest.importorskip("torch")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"case_{path.stem.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _data(n: int = 16):
    generator = torch.Generator().manual_seed(0)
    return [(torch.randn(2, 4, generator=generator), torch.tensor([0, 1])) for _ in range(n)]


@pytest.mark.parametrize(("name", "updates"), [("plain_loop.py", 16), ("plain_loop.fixed.py", 2)])
def test_ema202_fix_updates_once_per_optimizer_step(name: str, updates: int) -> None:
    module = _load(FIXTURES / "EMA202" / name)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ema = module.train(model, _data(), optimizer, torch.nn.CrossEntropyLoss(), 1)
    assert int(ema.n_averaged) == updates  # 16 micro-batches, accumulation over 8


@pytest.mark.parametrize(
    ("name", "training"), [("plain_loop.py", True), ("plain_loop.fixed.py", False)]
)
def test_ema204_fix_evaluates_in_eval_mode(name: str, training: bool) -> None:
    module = _load(FIXTURES / "EMA204" / name)
    seen: list[bool] = []
    real = module.evaluate

    def spy(net, loader):
        seen.append(net.training)
        return real(net, loader)

    module.evaluate = spy
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.Dropout(0.5))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    module.train(model, _data(), _data(4), optimizer, torch.nn.CrossEntropyLoss(), 2)
    # Evaluations alternate: the online model (put in eval mode), then the EMA.
    assert seen[1::2] == [training, training]
