"""Real and virtual (config mapping) calls of averaging APIs."""

from __future__ import annotations

from ema_lint.analysis.objects.api_calls import ApiCalls, BoundCalls, MappingCalls, swapped_trees
from tests.analysis.helpers import context


def test_real_calls_through_aliases() -> None:
    ctx = context(
        "import pytorch_lightning as pl\n"
        "from mmengine.hooks import EMAHook as Hook\n"
        "a = pl.callbacks.EMAWeightAveraging(decay=0.99)\n"
        "b = Hook(ema_type='ExpMomentumEMA', momentum=1e-4, gamma=100)\n"
        "c = Hook(ema_type=name_from_somewhere)\n"
    )
    a, b, c = ctx.get(ApiCalls).calls
    assert a.qualname == "pytorch_lightning.callbacks.EMAWeightAveraging"
    assert b.target.qualname == "mmdet.models.layers.ExpMomentumEMA"
    assert b.unknown_keywords == []
    assert c.target is None


def test_config_mappings_are_virtual_calls() -> None:
    ctx = context(
        "from mmengine.hooks import EMAHook\n"
        "custom_hooks = [\n"
        "    dict(type='EMAHook', momentum=0.0002, priority=49),\n"
        "    dict(type=EMAHook, ema_type='mmdet.ExpMomentumEMA', momentum=0.0001),\n"
        "    {'type': 'EMAHook', 'momentum': 0.0003, 'typo_keyword': 1},\n"
        "    dict(type='SyncNormHook'),\n"
        "]\n"
        "ema = {'_target_': 'timm.utils.ModelEmaV2', 'decay': 0.999}\n"
        "cb = {'class_path': 'lightning.pytorch.callbacks.EMAWeightAveraging',\n"
        "      'init_args': {'decay': 0.99}}\n"
        "plain = {'type': 'not an api'}\n"
    )
    calls = ctx.get(MappingCalls).calls
    assert [b.spec.short_name for b in calls] == [
        "EMAHook",
        "EMAHook",
        "EMAHook",
        "ModelEmaV2",
        "EMAWeightAveraging",
    ]
    assert all(b.virtual for b in calls)
    assert calls[0].target.short_name == "ExponentialMovingAverage"
    assert calls[1].target.qualname.startswith("mmdet.")
    assert calls[2].unknown_keywords == ["typo_keyword"]
    assert ctx.code(calls[4].value("decay")) == "0.99"
    merged = ctx.get(BoundCalls).calls
    assert merged == sorted(merged, key=lambda b: ctx.index.order[id(b.call)])
    assert len(merged) == 5


def test_string_dispatched_constructors_are_virtual_calls() -> None:
    ctx = context(
        "import dnnlib\n"
        "kwargs = dnnlib.EasyDict(class_name='training.phema.TraditionalEMA', halflife_Mimg=2)\n"
        "ema = dnnlib.util.construct_class_by_name(\n"
        "    class_name='training.phema.PowerFunctionEMA', net=net, stds=[0.05])\n"
        "other = dnnlib.util.construct_class_by_name(class_name='torch.optim.Adam', lr=1)\n"
        "plain = EasyDict(name='x')\n"
    )
    calls = ctx.get(MappingCalls).calls
    assert [b.spec.short_name for b in calls] == ["TraditionalEMA", "PowerFunctionEMA"]
    assert all(b.virtual for b in calls)
    assert ctx.code(calls[1].value("net")) == "net"


def test_swapped_trees_of_a_functional_update() -> None:
    ctx = context(
        "import optax\n"
        "ema = optax.incremental_update(ema, params, 0.999)\n"
        "ema = optax.incremental_update(params, ema, 0.001)\n"
        "mixed = optax.incremental_update(ema, params, 0.5)\n"
        "loss_avg = optax.incremental_update(loss_avg, loss, 0.9)\n"
    )
    found = [swapped_trees(ctx, b) for b in ctx.get(BoundCalls).calls]
    assert [f[2] if f else None for f in found] == ["ema", None, None, None]
