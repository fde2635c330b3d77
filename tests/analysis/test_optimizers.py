"""Optimizers known by where they were made, whatever the variable is called."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.training.loops import TrainingLoops


def _steps(source: str) -> list[str]:
    """The receivers of the calls the loop model takes for optimizer steps."""
    ctx = FileContext(cst.parse_module(source), "t.py")
    loops = ctx.get(TrainingLoops)
    return [ctx.code(c.func.value) for c in loops.step_calls]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "source",
    [
        "import torch\nsgd = torch.optim.SGD(params)\nsgd.step()\n",
        "import torch as th\nsgd = th.optim.SGD(params)\nsgd.step()\n",
        "from torch.optim import AdamW as W\nsgd = W(params)\nsgd.step()\n",
        "from lion_pytorch import Lion\nsgd = Lion(params)\nsgd.step()\n",
        "import bitsandbytes as bnb\nsgd = bnb.optim.AdamW8bit(params)\nsgd.step()\n",
        "from timm.optim import create_optimizer_v2\nsgd = create_optimizer_v2(m)\nsgd.step()\n",
        "sgd = Adafactor(params)\nsgd.step()\n",
        # Passed through accelerate, Fabric or apex, position by position.
        "import torch\nsgd = torch.optim.SGD(p)\nm, sgd, dl = acc.prepare(m, sgd, dl)\n"
        "sgd.step()\n",
        "import torch\nm, sgd = fabric.setup(m, torch.optim.SGD(p))\nsgd.step()\n",
        "import torch\nsgd = acc.prepare(torch.optim.SGD(p))\nsgd.step()\n",
        "sgd = accelerator.prepare_optimizer(thing)\nsgd.step()\n",
        # Annotated, or passed by every caller.
        "import torch\ndef f(sgd: torch.optim.Optimizer):\n    sgd.step()\n",
        "def f(sgd: 'Optimizer'):\n    sgd.step()\n",
        "import torch\ndef f(sgd):\n    sgd.step()\nf(torch.optim.SGD(p))\n",
        # An attribute of the instance; a class of the module derived from Optimizer.
        "import torch\nclass T:\n    def __init__(self):\n        self.sgd = torch.optim.SGD(p)\n"
        "    def fit(self):\n        self.sgd.step()\n",
        "import torch\nclass T:\n    def __init__(self, m):\n"
        "        self.m, self.sgd = acc.prepare(m, torch.optim.SGD(p))\n"
        "    def fit(self):\n        self.sgd.step()\n",
        "import torch\nclass Mine(torch.optim.Optimizer):\n    pass\nsgd = Mine(p)\nsgd.step()\n",
    ],
)
def test_an_optimizer_is_known_by_its_origin(source: str) -> None:
    assert len(_steps(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "import gymnasium as gym\nenv2 = gym.make('x')\nenv2.step(a)\n",
        "import torch\nlr = torch.optim.lr_scheduler.StepLR(o, 1)\nlr.step()\n",
        "from torch.optim.swa_utils import SWALR\nsw = SWALR(o, 0.1)\nsw.step()\n",
        "sgd = make_thing()\nsgd.step()\n",
        "def f(sgd):\n    sgd.step()\n",
        # Bound to an optimizer and to something else: unknown.
        "import torch\nsgd = torch.optim.SGD(p)\nsgd = runner()\nsgd.step()\n",
        "import torch\ndef f(sgd):\n    sgd.step()\nf(torch.optim.SGD(p))\nf(runner)\n",
        # Unpacked from a pass-through call with nothing known about what went in.
        "m, sgd = acc.prepare(m, sgd)\nsgd.step()\n",
        "m, sgd = acc.prepare(m, thing)\nsgd.step()\n",
        # A local class that is not an optimizer, with an optimizer's name.
        "class Lion:\n    pass\nsgd = Lion()\nsgd.step()\n",
    ],
)
def test_other_objects_with_a_step_method_are_not_optimizers(source: str) -> None:
    assert _steps(source) == []
