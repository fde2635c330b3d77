"""Configured averaging weights in training terms, and the run lengths they are judged by."""

from __future__ import annotations

import pytest

from ema_lint.analysis.objects.averaging import Use
from ema_lint.analysis.objects.run_length import RunLengths
from ema_lint.analysis.training.decays import DecaySettings, describe_value
from tests.analysis.helpers import calls_named, context


def settings(source: str):
    ctx = context(source)
    return ctx, ctx.get(DecaySettings).settings


def test_semantics_ramps_and_intervals() -> None:
    _, found = settings(
        "from mmengine.model import ExponentialMovingAverage\n"
        "from diffusers.training_utils import EMAModel\n"
        "from ema_pytorch import EMA\n"
        "from timm.utils import ModelEmaV3\n"
        "a = ExponentialMovingAverage(model, momentum=0.0002, interval=4)\n"
        "b = EMAModel(params, decay=0.999, use_ema_warmup=True, power=3 / 4)\n"
        "c = EMA(model)\n"
        "d = ModelEmaV3(model, decay=0.999, use_warmup=flag)\n"
        "e = ModelEmaV3(model, decay=0.999)\n"
    )
    a, b, c, d, e = found
    assert a.decay == pytest.approx(0.9998) and a.interval == 4 and a.spec_interval == 4
    assert a.step_decay == pytest.approx(0.9998**0.25)
    assert "a decay of 0.9998" in describe_value(a)
    assert b.ramp is not None and b.decay_after(10_000) == pytest.approx(1 - 10_001**-0.75)
    assert c.is_default and c.interval == 10 and c.expr is None and c.given == 0.9999
    assert d.ramp is None and d.ramp_unknown
    assert e.ramp is None and not e.ramp_unknown and e.decay_after(10) == 0.999


def test_guard_intervals_fold_only_when_the_step_is_elsewhere() -> None:
    _, found = settings(
        "from timm.utils import ModelEmaV2\n"
        "def train(model, loader, optimizer):\n"
        "    every_ten = ModelEmaV2(model, decay=0.99)\n"
        "    accumulated = ModelEmaV2(model, decay=0.99)\n"
        "    for i, batch in enumerate(loader):\n"
        "        model(batch).backward()\n"
        "        if (i + 1) % 4 == 0:\n"
        "            optimizer.step()\n"
        "            accumulated.update(model)\n"
        "        if i % 10 == 0:\n"
        "            every_ten.update(model)\n"
    )
    every_ten, accumulated = found
    assert every_ten.interval == 10 and every_ten.interval_from_guard
    assert accumulated.interval == 1


def test_uses_come_from_the_averaging_objects() -> None:
    _, found = settings(
        "import optax\n"
        "from timm.utils import ModelEmaV2\n"
        "teacher = ModelEmaV2(student, decay=0.996)\n"
        "g = optax.ema(0.9)\n"
    )
    assert [s.use for s in found] == [Use.TEACHER, Use.NOT_WEIGHTS]


RUNS = """
import argparse
import lightning.pytorch as pl
from timm.utils import ModelEmaV2
from lightning.pytorch.callbacks import EMAWeightAveraging

EPOCHS = 5
STEPS = 100

def loops(model, optimizer):
    ema = ModelEmaV2(model)
    for epoch in range(EPOCHS):
        for step in range(0, STEPS * 2, 2):
            if step % 4 == 0:
                ema.update(model)

def trainer():
    pl.Trainer(max_epochs=3, limit_train_batches=50, callbacks=[EMAWeightAveraging()])
"""


def test_run_lengths() -> None:
    ctx = context(RUNS)
    lengths = ctx.get(RunLengths)
    [update] = calls_named(ctx, "update")
    run = lengths.for_updates([update])
    assert run.steps == 5 * 100 / 4 and run.unit == "updates"
    assert run.via == "loops of EPOCHS=5 x range(0, STEPS * 2, 2)=100 / 4"
    [callback] = calls_named(ctx, "EMAWeightAveraging")
    run = lengths.for_updates([], callback)
    assert run.steps == 150 and "limit_train_batches=50" in run.via


@pytest.mark.parametrize(
    ("source", "steps"),
    [
        ("MAX_STEPS = 1000\n", 1000),
        ("epochs = 10\nsteps_per_epoch = 50\ngradient_accumulation_steps = 5\n", 100),
        (
            "import argparse\np = argparse.ArgumentParser()\n"
            "p.add_argument('--max_train_steps', type=int, default=300)\n",
            300,
        ),
        ("train_cfg = dict(type='IterBasedTrainLoop', max_iters=9000)\n", 9000),
        ("train_cfg = dict(by_epoch=False, max_iters=4000)\n", 4000),
        ("train_cfg = dict(by_epoch=True, max_epochs=12)\n", None),
        ("for batch in loader:\n    ema.update(model)\n", None),
    ],
)
def test_named_run_lengths(source: str, steps) -> None:
    ctx = context(source)
    updates = calls_named(ctx, "update")
    run = ctx.get(RunLengths).for_updates(updates)
    assert (run.steps if run else None) == steps


def test_a_warmup_schedule_value_is_judged_by_its_ceiling() -> None:
    source = (
        "import k_diffusion as K\n"
        "def train(model, model_ema, loader, opt):\n"
        "    sched = K.utils.EMAWarmup(power=2 / 3, max_value=0.999)\n"
        "    flat = K.utils.EMAWarmup(power=3 / 4)\n"
        "    for batch in loader:\n"
        "        opt.step()\n"
        "        d = sched.get_value()\n"
        "        K.utils.ema_update(model, model_ema, d)\n"
        "        K.utils.ema_update(model, model_ema, flat.get_value())\n"
    )
    _, found = settings(source)
    assert len(found) == 1  # a ceiling of one (the default) leaves the ramp as the horizon
    (setting,) = found
    assert setting.spec.short_name == "EMAWarmup" and setting.decay == 0.999
    assert setting.ramp is not None
    assert setting.decay_after(1_000) == pytest.approx(1 - 1_001 ** (-2 / 3))
    assert setting.used_by is not None


def test_half_life_in_images_is_a_decay_at_the_batch_size_of_the_updates() -> None:
    _, found = settings(
        "from training.phema import TraditionalEMA\n"
        "def train(net, loader):\n"
        "    a = TraditionalEMA(net, halflife_Mimg=0.5)\n"
        "    b = TraditionalEMA(net, halflife_Mimg=0.5, rampup_ratio=None)\n"
        "    for x in loader:\n"
        "        a.update(cur_nimg=0, batch_size=512)\n"
        "        b.update(0, x.shape[0])\n"
    )
    a, b = found
    assert a.half_life and a.given == 0.5 and a.batch == 512
    assert a.decay == pytest.approx(0.5 ** (512 / 500_000))
    assert a.value is not None and a.value.form == "half-life-samples"
    # The rampup caps the half-life at 9% of the images seen: 0.5 ** (1 / (0.09 * t)).
    assert a.ramp is not None and a.decay_after(100) == pytest.approx(0.5 ** (1 / 9))
    assert "a half-life of 500,000 samples" in describe_value(a)
    assert b.ramp is None and b.batch is None and b.decay is None
