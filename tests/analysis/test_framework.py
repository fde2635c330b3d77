"""Framework-run loops (Lightning hooks, Keras, mmengine), without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.training.framework import FrameworkHooks
from tests.analysis.helpers import calls_named, context

LIGHTNING = """
import lightning.pytorch as pl
from timm.utils import ModelEmaV2


class Lit(pl.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.net = net
        self.ema = ModelEmaV2(net)

    def training_step(self, batch, batch_idx):
        self._ema()
        return self.net(batch)

    def _ema(self):
        self.ema.update(self.net)

    def validation_step(self, batch, batch_idx):
        return self.ema.module(batch)


trainer = pl.Trainer(accumulate_grad_batches=ACCUM)
ACCUM = 2
"""


def test_lightning_hooks_and_per_batch_updates() -> None:
    ctx = context(LIGHTNING)
    hooks = ctx.get(FrameworkHooks)
    functions = {f.name.value: f for f in ctx.nodes(cst.FunctionDef)}
    assert hooks.lightning_hook(functions["training_step"])
    assert not hooks.lightning_hook(functions["_ema"])  # a private helper is not a hook
    assert hooks.is_eval_hook(functions["validation_step"])
    assert not hooks.is_eval_hook(functions["training_step"])
    [obj] = ctx.get(AveragingObjects).objects
    [(update, hook, setting)] = list(hooks.per_batch_updates(obj))
    assert hook.name.value == "training_step" and ctx.code(setting) == "ACCUM"
    assert ctx.code(hooks.anchor_in(update, hook)) == "self._ema()"


def test_no_accumulation_no_per_batch_finding() -> None:
    ctx = context(LIGHTNING.replace("ACCUM = 2", "ACCUM = 1"))
    [obj] = ctx.get(AveragingObjects).objects
    assert list(ctx.get(FrameworkHooks).per_batch_updates(obj)) == []


def test_per_batch_update_without_a_trainer_setting_is_reported_alone() -> None:
    # The accumulation setting usually lives in another file or on the command line.
    source = LIGHTNING.replace("trainer = pl.Trainer(accumulate_grad_batches=ACCUM)\n", "")
    ctx = context(source)
    [obj] = ctx.get(AveragingObjects).objects
    [(_, hook, setting)] = list(ctx.get(FrameworkHooks).per_batch_updates(obj))
    assert hook.name.value == "training_step" and setting is None


def test_hooks_through_local_base_classes_and_callbacks() -> None:
    ctx = context(
        "import lightning.pytorch as pl\n"
        "from timm.utils import ModelEmaV2\n"
        "class Base(pl.LightningModule):\n"
        "    pass\n"
        "class Model(Base):\n"
        "    def __init__(self, net):\n"
        "        self.net = net\n"
        "        self.ema = ModelEmaV2(net)\n"
        "    def on_train_batch_end(self, outputs, batch, batch_idx):\n"
        "        self.ema.update(self.net)\n"
        "    def on_before_zero_grad(self, optimizer):\n"
        "        self.ema.update(self.net)\n"
    )
    hooks = ctx.get(FrameworkHooks)
    [model] = [c for c in ctx.nodes(cst.ClassDef) if c.name.value == "Model"]
    assert hooks.is_lightning_module(model)
    [obj] = ctx.get(AveragingObjects).objects
    found = list(hooks.per_batch_updates(obj))
    assert [hook.name.value for _, hook, _ in found] == ["on_train_batch_end"]


def test_keras_and_mmengine_accumulation() -> None:
    ctx = context(
        "import keras\n"
        "opt = keras.optimizers.Adam(use_ema=True, gradient_accumulation_steps=4)\n"
        "optim_wrapper = dict(type='OptimWrapper', accumulative_counts=2)\n"
        "hooks = [dict(type='EMAHook', momentum=0.001)]\n"
        "ok = [dict(type='EMAHook', momentum=0.001, interval=4)]\n"
    )
    hooks = ctx.get(FrameworkHooks)
    optimizer, hook, with_interval = ctx.get(AveragingObjects).objects
    assert len(list(hooks.optimizer_ema_accumulation(optimizer))) == 1
    [(_, counts, fix)] = list(hooks.mmengine_ema_accumulation(hook))
    assert ctx.code(counts) == "2" and fix is not None
    assert list(hooks.mmengine_ema_accumulation(with_interval)) == []
    assert calls_named(ctx, "Adam")
