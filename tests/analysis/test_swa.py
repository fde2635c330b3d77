"""The SWA model of a module (sites, starts, update_bn, uses, schedules), without any rule."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.training.swa import SwaAnalysis
from tests.analysis.helpers import calls_named, context

DOCS = """
import torch
from torch.optim.swa_utils import AveragedModel, SWALR, update_bn

swa_model = AveragedModel(model)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=300)
swa_start = 160
swa_scheduler = SWALR(optimizer, swa_lr=0.05)
for epoch in range(300):
    for input, target in loader:
        optimizer.zero_grad()
        loss_fn(model(input), target).backward()
        optimizer.step()
    if epoch > swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
update_bn(loader, swa_model)
preds = swa_model(test_input)
"""


def _swa(source: str):
    ctx = context(source)
    return ctx, ctx.get(SwaAnalysis)


def test_the_documentation_loop() -> None:
    ctx, swa = _swa(DOCS)
    [model] = swa.models
    assert model.equal and model.buffers_averaged is False and model.name == "swa_model"
    [site] = model.sites
    assert site.loop is site.outer and ctx.code(site.outer.iter) == "range(300)"
    start = swa.start(site)
    assert start is not None and start.first == 161 and start.length == 300
    assert start.setting_for(0.75) == 224  # `epoch > s` starts at s + 1
    assert swa.conditional(site)
    [bn] = model.bn_calls
    assert swa.bn_placement(bn, model) == "after"
    assert [u.kind for u in swa.uses(model)] == ["call"]
    # The regular scheduler steps in the else branch: only SWALR runs while averaging.
    assert [s.short_name for _, s in swa.scheduler_steps(site)] == ["SWALR"]


SPLIT = """
import argparse
import torch
import torch.optim.swa_utils as su

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=200)
parser.add_argument("--swa_start", type=float, default=161)
args = parser.parse_args()


def train_one_epoch(model, loader, optimizer, scheduler, device):
    for x, y in loader:
        x = x.to(device)
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
        scheduler.step()


def maybe_average(avg, model, epoch):
    if epoch + 1 >= args.swa_start:
        avg.update_parameters(model)


def fit(model, swa_model, train_loader, optimizer, scheduler, device):
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer, scheduler, device)
        maybe_average(swa_model, model, epoch)


def main():
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=1000)
    swa = su.AveragedModel(model)
    fit(model, swa, get_loader(), optimizer, scheduler, "cuda")
    return swa
"""


def test_sites_across_functions() -> None:
    ctx, swa = _swa(SPLIT)
    [model] = swa.models
    [site] = model.sites
    assert ctx.code(site.outer.iter) == "range(args.epochs)"
    assert [ctx.code(c).split("(")[0] for c in site.full_chain] == ["maybe_average"]
    start = swa.start(site)
    assert start is not None and start.first == 160 and start.length == 200
    assert start.value.via == "--swa_start default"
    assert start.setting_for(0.75) == 151  # 1-based: `epoch + 1 >= s`
    [batch] = swa.batch_loops(site)
    assert ctx.code(swa.at_outer(site, batch, batch.loader)) == "train_loader"
    assert ctx.code(swa.at_outer(site, batch, batch.device)) == "device"
    assert ctx.code(swa.spelled_at_outer(model, site)) == "swa_model"
    assert [s.short_name for _, s in swa.scheduler_steps(site)] == ["OneCycleLR"]
    assert [u.kind for u in swa.uses(model)] == ["return"]


@pytest.mark.parametrize(
    ("condition", "first"),
    [
        ("if epoch >= START:\n        ", 10),
        ("if START <= epoch:\n        ", 10),
        ("if epoch + 1 > START:\n        ", 10),
        ("if use_swa and epoch >= START and epoch % 2 == 0:\n        ", 10),
        ("if epoch < START:\n        pass\n    else:\n        ", 10),
        ("if epoch < START:\n        continue\n    ", 10),
    ],
)
def test_start_conditions(condition: str, first: int) -> None:
    source = (
        "from torch.optim.swa_utils import AveragedModel\n"
        "START = 10\nEPOCHS = 40\n"
        "swa = AveragedModel(model)\n"
        "for epoch in range(EPOCHS):\n"
        "    train(model)\n"
        f"    {condition}swa.update_parameters(model)\n"
    )
    _, swa = _swa(source)
    [site] = swa.models[0].sites
    start = swa.start(site)
    assert start is not None and start.first == first and start.length == 40
    assert start.length_text == "EPOCHS = 40"


def test_no_start_condition_and_constant_flags() -> None:
    _, swa = _swa(
        "from torch.optim.swa_utils import AveragedModel\n"
        "USE_SWA = True\n"
        "swa = AveragedModel(model)\n"
        "for epoch in range(10):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "    if USE_SWA:\n"
        "        swa.update_parameters(model)\n"
        "evaluate(swa)\n"
    )
    [site] = swa.models[0].sites
    assert swa.start(site) is None and not swa.conditional(site)
    assert not swa.separate_phase(site) and not swa.loads_trained_weights()


def test_update_bn_placement_live_model_and_swap() -> None:
    _ctx, swa = _swa(
        "from torch.optim.swa_utils import AveragedModel, update_bn\n"
        "swa = AveragedModel(net)\n"
        "update_bn(loader, swa)\n"
        "for epoch in range(10):\n"
        "    train(net)\n"
        "    update_bn(loader, swa)\n"
        "    swa.update_parameters(net)\n"
        "    update_bn(loader, swa.module)\n"
        "update_bn(loader, net)\n"
        "net.load_state_dict(swa.module.state_dict())\n"
    )
    [model] = swa.models
    placements = [swa.bn_placement(b, model) for b in model.bn_calls]
    assert placements == ["before", "before", "after"]
    # The live model gets the averaged weights: recalibrating it is fine.
    assert swa.live_bn_calls(model) == []
    assert [u.kind for u in swa.uses(model)] == ["method"]


def test_live_model_given_to_update_bn() -> None:
    ctx, swa = _swa(
        "from torch.optim.swa_utils import AveragedModel, update_bn\n"
        "net = Net().cuda()\n"
        "swa = AveragedModel(net)\n"
        "for epoch in range(10):\n"
        "    train(net)\n"
        "    swa.update_parameters(net)\n"
        "update_bn(loader, net.to('cuda'))\n"
        "for m in models:\n"
        "    update_bn(loader, m)\n"
    )
    [model] = swa.models
    [live] = swa.live_bn_calls(model)
    assert ctx.code(live.value("model")) == "net.to('cuda')"
    [unknown] = swa.unidentified_bn_calls()
    assert ctx.code(unknown.value("model")) == "m"


def test_uses_ignore_updates_setup_and_local_pass_through() -> None:
    ctx, swa = _swa(
        "from torch import nn\n"
        "from torch.optim.swa_utils import AveragedModel, update_bn\n"
        "def step(avg, net):\n"
        "    avg.update_parameters(net)\n"
        "class Lit(nn.Module):\n"
        "    def __init__(self, net):\n"
        "        super().__init__()\n"
        "        self.avg = AveragedModel(net)\n"
        "        self.avg.to('cpu').eval()\n"
        "def run(net):\n"
        "    swa = AveragedModel(net)\n"
        "    alias = swa\n"
        "    for epoch in range(3):\n"
        "        step(alias, net)\n"
        "    update_bn(loader, swa)\n"
        "    swa.eval()\n"
    )
    registered, unused = swa.models
    assert [u.kind for u in swa.uses(registered)] == ["registered"]
    assert swa.uses(unused) == []
    assert [ctx.code(s.call) for s in unused.sites] == ["avg.update_parameters(net)"]


def test_equal_average_and_buffers() -> None:
    _, swa = _swa(
        "from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn, "
        "get_swa_multi_avg_fn\n"
        "a = AveragedModel(m)\n"
        "b = AveragedModel(m, use_buffers=True)\n"
        "c = AveragedModel(m, multi_avg_fn=get_ema_multi_avg_fn(0.999))\n"
        "d = AveragedModel(m, multi_avg_fn=get_swa_multi_avg_fn())\n"
        "e = AveragedModel(m, use_buffers=flag)\n"
        "f = AveragedModel(m, **kwargs)\n"
    )
    found = [(m.equal, m.buffers_averaged) for m in swa.models]
    assert found == [
        (True, False),
        (True, True),
        (False, False),
        (True, False),
        (True, None),
        (False, None),
    ]


@pytest.mark.parametrize(
    ("callback", "first", "length", "fraction"),
    [
        ("StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=0.1)", 1, 20, 0.05),
        ("StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=5)", 4, 20, 0.2),
        ("StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=15)", 14, 20, 0.7),
    ],
)
def test_lightning_starts(callback: str, first: int, length: int, fraction: float) -> None:
    _ctx, swa = _swa(
        "import lightning.pytorch as pl\n"
        "from lightning.pytorch.callbacks import StochasticWeightAveraging\n"
        f"trainer = pl.Trainer(max_epochs=20, callbacks=[{callback}])\n"
    )
    [obj] = swa.objects.objects
    start = swa.callback_start(obj)
    assert start is not None and (start.first, start.length) == (first, length)
    assert start.fraction == pytest.approx(fraction)


def test_lightning_default_and_positional_starts_are_not_read() -> None:
    _, swa = _swa(
        "from lightning.pytorch.callbacks import StochasticWeightAveraging\n"
        "a = StochasticWeightAveraging(swa_lrs=0.01)\n"
        "b = StochasticWeightAveraging(0.01, 0.1)\n"
    )
    assert [swa.callback_start(o) for o in swa.objects.objects] == [None, None]


def test_mmengine_hook_start() -> None:
    _, swa = _swa(
        "custom_hooks = [dict(type='EMAHook', ema_type='StochasticWeightAverage', "
        "begin_epoch=3)]\n"
        "train_cfg = dict(by_epoch=True, max_epochs=12)\n"
    )
    [obj] = swa.objects.objects
    start = swa.callback_start(obj)
    assert start is not None and start.first == 3 and start.length == 12
    assert start.setting_for(0.75) == 9


def test_separate_phases_and_loaded_weights() -> None:
    _ctx, swa = _swa(
        "import torch\n"
        "from torch.optim.swa_utils import AveragedModel\n"
        "def pretrain(model):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "def swa_phase(model, swa_epochs):\n"
        "    swa = AveragedModel(model)\n"
        "    for epoch in range(swa_epochs):\n"
        "        for x in loader:\n"
        "            model(x).sum().backward()\n"
        "            opt.step()\n"
        "        swa.update_parameters(model)\n"
        "    return swa\n"
        "model.load_state_dict(torch.load('ckpt.pt'))\n"
    )
    [site] = swa.models[0].sites
    assert swa.separate_phase(site)
    assert swa.loads_trained_weights()


def test_modules_without_averaged_models_cost_nothing() -> None:
    ctx, swa = _swa("import torch\nmodel = torch.nn.Linear(2, 2)\n")
    assert swa.models == [] and swa.bn_updates == []
    assert not calls_named(ctx, "update_parameters")
    assert isinstance(ctx.module, cst.Module)
