"""Freezing of averaged copies and optimizers reaching their parameters."""

from __future__ import annotations

from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.training.trainable import TrainableCopies
from tests.analysis.helpers import context

SOURCE = """
import copy
from torch import optim
from torch import nn

class Holder(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.ema = copy.deepcopy(net)

    def opt(self):
        return optim.Adam(self.parameters())

ema_a = copy.deepcopy(model)
ema_b = copy.deepcopy(model).requires_grad_(False)
ema_c = copy.deepcopy(model)
for p in ema_c.parameters():
    p.requires_grad_(False)
params = [*model.parameters(), *ema_a.parameters()]
o1 = optim.AdamW(params)
o2 = optim.SGD(ema_b.parameters(), lr=0.1)
holder = Holder(model)
o3 = optim.Adam(holder.parameters())
"""


def test_frozen_and_reach() -> None:
    ctx = context(SOURCE)
    trainable = ctx.get(TrainableCopies)
    found = {o.names[0]: o for o in ctx.get(AveragingObjects).objects}
    assert not trainable.frozen(found["ema_a"])
    assert trainable.frozen(found["ema_b"]) and trainable.frozen(found["ema_c"])
    [reach] = trainable.reaches(found["ema_a"])
    assert (
        reach.how == "direct" and not reach.alone and ctx.code(reach.node) == "ema_a.parameters()"
    )
    [alone] = trainable.reaches(found["ema_b"])
    assert alone.alone
    child = trainable.reaches(found["self.ema"])
    assert sorted(ctx.code(r.node) for r in child) == ["holder.parameters()", "self.parameters()"]
    assert {r.how for r in child} == {"child"}
