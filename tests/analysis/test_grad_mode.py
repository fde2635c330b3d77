"""Where autograd records: no_grad blocks, decorated functions, helpers and their callers."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.training.grad_mode import GradMode
from tests.analysis.helpers import calls_named, context


def verdicts(source: str, name: str = "mul_") -> list[bool | None]:
    ctx = context(source)
    mode = ctx.get(GradMode)
    return [mode.records(call) for call in calls_named(ctx, name)]


def test_blocks_decorators_and_script_code() -> None:
    assert verdicts(
        """
import torch
from torch import no_grad

e.mul_(d)
with torch.no_grad():
    e.mul_(d)
with torch.inference_mode(), other():
    e.mul_(d)
with torch.set_grad_enabled(False):
    e.mul_(d)

@no_grad()
def decorated():
    e.mul_(d)

@torch.inference_mode()
def inference():
    e.mul_(d)
"""
    ) == [True, False, False, False, False, False]


def test_helpers_follow_their_callers() -> None:
    assert verdicts(
        """
import torch

def guarded_everywhere(e, d):
    e.mul_(d)

def called_outside(e, d):
    e.mul_(d)

def never_called(e, d):
    e.mul_(d)

def main():
    for batch in loader:
        with torch.no_grad():
            guarded_everywhere(e, d)
            called_outside(e, d)
        called_outside(e, d)

def training_step(self, batch):
    e.mul_(d)

def forward(self, x):
    e.mul_(d)
"""
    ) == [False, True, None, True, True]


def test_methods_of_instances_of_the_module_classes() -> None:
    ctx = context(
        """
import torch

class EMA:
    def __init__(self, model):
        self.shadow = model

    def update(self, model):
        for e, p in zip(self.shadow.parameters(), model.parameters()):
            e.mul_(0.999).add_(p, alpha=0.001)

    def __call__(self, model):
        self.shadow.weight.mul_(0.5)

class Trainer:
    def __init__(self, model):
        self.ema = EMA(model).to("cuda")

    def fit(self, model):
        for batch in loader:
            model(batch).backward()
            self.ema.update(model)
        helper(EMA(model), model)

def helper(ema, model):
    with torch.no_grad():
        ema(model)
"""
    )
    mode = ctx.get(GradMode)
    first, second = calls_named(ctx, "mul_")
    assert mode.records(first) is True
    assert mode.records(second) is False
    [update] = [f for f in ctx.nodes(cst.FunctionDef) if f.name.value == "update"]
    assert [ctx.code(c) for c in mode.callers(update)] == ["self.ema.update(model)"]
