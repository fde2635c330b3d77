"""Creations of objects and expressions lifted into callers, without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.origins import Origins
from tests.analysis.helpers import calls_named, context

SPLIT = """
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR

LOADER = make_loader()


def train_one_epoch(model, loader, optimizer, scheduler, device="cuda"):
    for x, y in loader:
        x = x.to(device)
        optimizer.step()
        scheduler.step()
    local = 1
    return local, LOADER


class Trainer:
    def __init__(self, model):
        self.model = model.cuda()
        self.sched = CosineAnnealingLR(self.opt, T_max=10)

    def epoch(self, loader):
        for batch in loader:
            self.sched.step()

    def fit(self):
        for e in range(3):
            self.epoch(self.loaders["train"])


def main():
    model = Net().to("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = CosineAnnealingLR(optimizer, T_max=100)
    train_loader = make_loader()
    for epoch in range(100):
        train_one_epoch(model, train_loader, optimizer, scheduler)
"""


def _origins(source: str):
    ctx = context(source)
    return ctx, ctx.get(Origins)


def test_creation_through_parameters_self_and_same_object_chains() -> None:
    ctx, origins = _origins(SPLIT)
    step, self_step = calls_named(ctx, "step")[1:3]
    made = origins.creation(step.func.value)  # `scheduler` in train_one_epoch
    assert made is not None and ctx.code(made) == "CosineAnnealingLR(optimizer, T_max=100)"
    made = origins.creation(self_step.func.value)  # self.sched
    assert made is not None and ctx.code(made).startswith("CosineAnnealingLR(self.opt")
    [net] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == 'Net().to("cuda")']
    model = [n for n in ctx.nodes(cst.Name) if n.value == "model"][-1]
    assert ctx.code(origins.creation(model)) == "Net()"
    assert origins.creation(net) is not None


def test_creation_is_unknown_when_callers_disagree() -> None:
    ctx, origins = _origins("def f(s):\n    s.step()\nf(A())\nf(B())\n")
    [step] = calls_named(ctx, "step")
    assert origins.creation(step.func.value) is None


def test_lift_parameters_defaults_and_module_names() -> None:
    ctx, origins = _origins(SPLIT)
    [call] = [c for c in calls_named(ctx, "train_one_epoch")]
    loop = ctx.nodes(cst.For)[0]
    lifted = origins.lift(loop.iter, call)
    assert ctx.code(lifted) == "train_loader"
    [to] = calls_named(ctx, "to")[:1]
    assert ctx.code(origins.lift(to.args[0].value, call)) == '"cuda"'  # the default
    ret = ctx.nodes(cst.Return)[0].value
    assert origins.lift(ret, call) is None  # `local` is the callee's own variable
    [module_name] = [n for n in ctx.nodes(cst.Name) if n.value == "LOADER"][1:]
    assert origins.lift(module_name, call) is module_name


def test_lift_keeps_self_between_methods_of_one_class() -> None:
    ctx, origins = _origins(SPLIT)
    [call] = calls_named(ctx, "epoch")
    loop = ctx.nodes(cst.For)[1]
    assert ctx.code(origins.lift(loop.iter, call)) == 'self.loaders["train"]'


def test_lift_through_a_chain_of_calls() -> None:
    ctx, origins = _origins(
        "def inner(dl, dev):\n"
        "    for x in dl:\n"
        "        x.to(dev)\n"
        "def outer(loader, device):\n"
        "    inner(loader, device)\n"
        "def main():\n"
        "    outer(train_loader, torch.device('cuda'))\n"
    )
    [inner] = calls_named(ctx, "inner")
    [outer] = calls_named(ctx, "outer")
    [to] = calls_named(ctx, "to")
    assert ctx.code(origins.lift_through(to.args[0].value, (outer, inner))) == (
        "torch.device('cuda')"
    )
    assert origins.lift_through(to.func.value, (outer, inner)) is None  # the loop variable
