"""Learning-rate schedulers and their steps, without any rule."""

from __future__ import annotations

from ema_lint.analysis.objects.schedulers import LrSchedulers, ScheduleKind
from tests.analysis.helpers import calls_named, context

SOURCE = """
import torch
from torch.optim import lr_scheduler as ls
from torch.optim.swa_utils import SWALR
from transformers import get_scheduler


def train(model, loader, optimizer, scheduler):
    for x in loader:
        optimizer.step()
        scheduler.step()


def main(optimizer, epochs):
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    restarts = ls.CosineAnnealingWarmRestarts(optimizer, T_0=10)
    warmup = ls.LinearLR(optimizer, start_factor=0.1)
    decay = ls.LinearLR(optimizer, 1.0, 0.0, total_iters=epochs)
    named = get_scheduler("cosine", optimizer)
    swa = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(epochs):
        train(model, loader, optimizer, cosine)
        restarts.step()
        swa.step()
"""


def test_kinds_from_the_table_and_the_arguments() -> None:
    ctx = context(SOURCE)
    found = ctx.get(LrSchedulers)
    assert [s.kind for s in found.schedulers] == [
        ScheduleKind.DECAYING,
        ScheduleKind.CYCLIC,
        ScheduleKind.WARMUP,
        ScheduleKind.DECAYING,
        ScheduleKind.DECAYING,
        ScheduleKind.SWA,
    ]
    assert found.schedulers[-1].short_name == "SWALR"


def test_steps_are_followed_through_parameters() -> None:
    ctx = context(SOURCE)
    found = ctx.get(LrSchedulers)
    in_train, restarts, swa = calls_named(ctx, "step")[1:]
    assert found.of_step(in_train).short_name == "CosineAnnealingLR"
    assert found.of_step(restarts).kind is ScheduleKind.CYCLIC
    assert found.of_step(swa).kind is ScheduleKind.SWA
    [optimizer_step] = calls_named(ctx, "step")[:1]
    assert found.of_step(optimizer_step) is None


def test_no_scheduler_no_work() -> None:
    ctx = context("optimizer.step()\n")
    assert ctx.get(LrSchedulers).schedulers == []
