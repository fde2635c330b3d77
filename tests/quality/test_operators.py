"""Each mutation operator on a small synthetic snippet: the mutant, and the expected line."""

from __future__ import annotations

import ast

import pytest

from benchmarks.quality import mutation
from benchmarks.quality.operators import OPERATORS, by_name

TRAIN = """\
import copy
import torch
from timm.utils import ModelEmaV2


def train(model, loader, optimizer, scaler, accum):
    model = model.cuda()
    model_ema = ModelEmaV2(model, decay=0.9998)
    for i, (x, y) in enumerate(loader):
        loss = model(x).sum()
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            model_ema.update(model)
"""

ACCELERATE = """\
def train(accelerator, model, ema_unet, loader, optimizer):
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(batch)
            accelerator.backward(loss)
            optimizer.step()
        if accelerator.sync_gradients:
            ema_unet.step(model.parameters())
"""

CONTINUE = """\
def train(model, ema, loader, optimizer, k):
    for step, batch in enumerate(loader):
        model(batch).backward()
        if (step + 1) % k != 0:
            continue
        optimizer.step()
        ema.update(model)
"""

HAND = """\
import copy
import torch


def make(model):
    ema_model = copy.deepcopy(model).eval()
    return ema_model


def update_ema(ema_model, model, decay=0.999):
    with torch.no_grad():
        for ema_p, p in zip(ema_model.parameters(), model.parameters()):
            ema_p.mul_(decay).add_(p, alpha=1 - decay)


def run(model, loader, device):
    ema_model = copy.deepcopy(model)
    ema_model.eval()
    for x in loader:
        pass
    with torch.no_grad():
        out = ema_model(x.to(device))
    return out
"""

AUG = """\
def update(ema_state, state, decay):
    for ema_v, v in zip(ema_state.values(), state.values()):
        ema_v *= decay
        ema_v += (1 - decay) * v
"""

SUM = """\
def update(ema_params, params, beta):
    for ema_p, p in zip(ema_params, params):
        ema_p.copy_(beta * ema_p + (1 - beta) * p)
"""

LERP = """\
def update(ema_params, params, beta):
    for ema_p, p in zip(ema_params, params):
        ema_p.lerp_(p, 1 - beta)
"""

SWA = """\
import argparse
import torch
from torch.optim.swa_utils import AveragedModel, SWALR, update_bn

parser = argparse.ArgumentParser()
parser.add_argument("--swa_start", type=int, default=160)
args = parser.parse_args()


def train(model, loader, optimizer, epochs):
    swa_model = AveragedModel(model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=300)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(epochs):
        for x in loader:
            optimizer.step()
        if epoch > args.swa_start:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
    update_bn(loader, swa_model)
    return swa_model
"""

SWA_START = """\
def train(model, swa_model, loader, optimizer, swa_start):
    for epoch in range(300):
        optimizer.step()
        if epoch >= swa_start:
            swa_model.update_parameters(model)
    return swa_model
"""

DDP = """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from timm.utils import ModelEmaV2


def setup(model, args):
    model = DDP(model.cuda(), device_ids=[0])
    model_ema = ModelEmaV2(model.module, decay=0.9998)
    return model, model_ema


def setup2(model, args):
    model_ema = ModelEmaV2(model, decay=0.9998)
    if args.distributed:
        model = DDP(model, device_ids=[0])
    return model, model_ema
"""

MOMENTUM = """\
custom_hooks = [dict(type="EMAHook", ema_type="ExpMomentumEMA", momentum=0.0002, priority=49)]
"""


def _mutants(op: str, src: str) -> list[mutation.Mutant]:
    errors: list = []
    out = mutation.mutants_of("t.py", src, [by_name(op)], errors=errors)
    assert errors == []
    for m in out:
        ast.parse(m.code)
        assert m.codes == by_name(op).codes
    return out


def _line(m: mutation.Mutant, text: str) -> int:
    return next(i for i, line in enumerate(m.code.splitlines(), 1) if text in line)


@pytest.mark.parametrize(
    ("op", "value"), [("decay-0.9", "0.9"), ("decay-1.0", "1.0"), ("decay-0.99999", "0.99999")]
)
def test_decay_values(op: str, value: str) -> None:
    ms = _mutants(op, TRAIN)
    assert len(ms) == 1
    assert f"ModelEmaV2(model, decay={value})" in ms[0].code
    assert 8 in ms[0].lines
    hand = _mutants(op, HAND)
    assert [f"decay={value}" in m.code for m in hand] == [True]
    assert 10 in hand[0].lines


def test_momentum_one_minus() -> None:
    (m,) = _mutants("momentum-one-minus", MOMENTUM)
    assert "momentum=0.9998" in m.code and m.lines == (1,)
    assert _mutants("momentum-one-minus", TRAIN) == []  # decay is not a momentum-style parameter


def test_update_out_of_modulo_guard() -> None:
    (m,) = _mutants("update-outside-accumulation", TRAIN)
    lines = m.code.splitlines()
    assert lines[-1] == "        model_ema.update(model)"
    assert m.lines == (len(lines),)


def test_update_out_of_sync_gradients_and_into_accumulate_block() -> None:
    ms = _mutants("update-outside-accumulation", ACCELERATE)
    assert len(ms) == 2
    out_of_guard, into_block = ms
    assert out_of_guard.code.splitlines()[-1] == "        ema_unet.step(model.parameters())"
    assert "        if accelerator.sync_gradients:\n            pass" in out_of_guard.code
    assert out_of_guard.lines == (9,)
    assert (
        "            optimizer.step()\n            ema_unet.step(model.parameters())"
        in into_block.code
    )
    assert into_block.lines == (7,)


def test_update_above_continue() -> None:
    (m,) = _mutants("update-outside-accumulation", CONTINUE)
    assert _line(m, "ema.update(model)") == 4 and m.lines == (4,)
    assert _line(m, "continue") == 6


def test_update_before_step() -> None:
    (m,) = _mutants("update-before-step", TRAIN)
    assert _line(m, "model_ema.update(model)") == 13 and m.lines == (13,)
    assert _line(m, "scaler.step(optimizer)") == 14


def test_eval_removed() -> None:
    (m,) = _mutants("eval-removed", HAND)
    assert ".eval()" not in m.code.split("def run")[1]
    assert "ema_model = copy.deepcopy(model)\n    pass" in m.code
    assert {6, 17, 22} <= set(m.lines)  # the creations, the evaluation


@pytest.mark.parametrize(("op", "tail"), [("copy-on-cpu", ".cpu()"), ("copy-to-cpu", '.to("cpu")')])
def test_copy_on_cpu(op: str, tail: str) -> None:
    # Only the copy made where the model trains on a device (run() moves batches to it):
    # a copy put on the CPU in a function that never touches an accelerator is no bug.
    ms = _mutants(op, HAND)
    assert [m.lines for m in ms] == [(17,)]
    assert f"ema_model = copy.deepcopy(model){tail}\n" in ms[0].code


def test_copy_of_ddp() -> None:
    a, b = _mutants("copy-of-ddp", DDP)
    assert "ModelEmaV2(model, decay=0.9998)\n    return model, model_ema" in a.code and a.lines == (
        8,
    )
    lines = b.code.splitlines()
    assert lines[12:15] == [
        "    if args.distributed:",
        "        model = DDP(model, device_ids=[0])",
        "    model_ema = ModelEmaV2(model, decay=0.9998)",
    ]
    assert b.lines == (15,)


def test_out_of_place() -> None:
    m, head, tail = _mutants("out-of-place", HAND)
    assert "ema_p = ema_p.mul(decay).add(p, alpha=1 - decay)" in m.code and m.lines == (13,)
    assert "        ema_p.mul(decay).add_(p, alpha=1 - decay)\n" in head.code
    assert head.lines == (13,)
    assert "        ema_p.mul_(decay).add(p, alpha=1 - decay)\n" in tail.code
    assert tail.lines == (13,)
    a, b = _mutants("out-of-place", AUG)
    assert "ema_v = ema_v * decay" in a.code and a.lines == (3,)
    assert "ema_v = ema_v + (1 - decay) * v" in b.code and b.lines == (4,)
    (c,) = _mutants("out-of-place", SUM)
    assert "ema_p = beta * ema_p + (1 - beta) * p" in c.code


def test_coefficients_swapped() -> None:
    (m,) = _mutants("coefficients-swapped", HAND)
    assert "ema_p.mul_(1 - decay).add_(p, alpha=decay)" in m.code and m.lines == (13,)
    (s,) = _mutants("coefficients-swapped", SUM)
    assert "ema_p.copy_((1 - beta) * ema_p + beta * p)" in s.code and s.lines == (3,)
    (lerp,) = _mutants("coefficients-swapped", LERP)
    assert "ema_p.lerp_(p, beta)" in lerp.code


def test_no_grad_removed() -> None:
    (m,) = _mutants("no-grad-removed", HAND)
    assert "def update_ema(ema_model, model, decay=0.999):\n    for ema_p" in m.code
    assert _line(m, "ema_p.mul_") == 12 and m.lines == (12,)
    # the evaluation's no_grad is not an update: left alone
    assert "    with torch.no_grad():\n        out = ema_model" in m.code


def test_no_grad_kept_when_the_shadow_is_frozen() -> None:
    frozen = HAND.replace(
        "    return ema_model\n", "    ema_model.requires_grad_(False)\n    return ema_model\n", 1
    )
    assert _mutants("no-grad-removed", frozen) == []


def test_update_bn_removed() -> None:
    (m,) = _mutants("update-bn-removed", SWA)
    assert "update_bn(loader" not in m.code and "    pass\n    return swa_model" in m.code
    assert set(m.lines) == {11, 22}


def test_swa_start_zero_and_condition_removed() -> None:
    (m,) = _mutants("swa-start-zero", SWA)
    assert 'parser.add_argument("--swa_start", type=int, default=0)' in m.code
    assert {6, 17, 18} <= set(m.lines)
    (c,) = _mutants("swa-start-zero", SWA_START)
    assert "if epoch" not in c.code
    assert _line(c, "swa_model.update_parameters") == 4 and c.lines == (4,)


def test_swalr_removed() -> None:
    (m,) = _mutants("swalr-removed", SWA)
    assert "SWALR(optimizer" not in m.code and "swa_scheduler" not in m.code
    assert "            swa_model.update_parameters(model)\n            scheduler.step()" in m.code
    assert {18, 19} <= set(m.lines)


def test_every_operator_has_a_test_snippet() -> None:
    snippets = (TRAIN, ACCELERATE, CONTINUE, HAND, AUG, SUM, LERP, SWA, SWA_START, DDP, MOMENTUM)
    for op in OPERATORS:
        assert any(mutation.mutants_of("t.py", s, [op]) for s in snippets), op.name


def test_a_file_without_averaging_gets_no_mutant() -> None:
    src = (
        "import torch\n\nopt = torch.optim.SGD([], lr=0.1, momentum=0.9)\nbn = "
        "torch.nn.BatchNorm2d(3, momentum=0.1)\n"
    )
    assert mutation.mutants_of("t.py", src) == []


def test_judge_new_finding_and_preexisting() -> None:
    from benchmarks.quality.linter import Finding

    (m,) = _mutants("update-before-step", TRAIN)
    orig = [Finding("t.py", 3, 1, "EMA101", anchor="x")]
    got = [
        Finding("m/t.py", 3, 1, "EMA101", anchor="x"),
        Finding("m/t.py", 14, 1, "EMA203", anchor="y"),
    ]
    r = mutation.judge(m, got, orig)
    assert r.detected is not None and r.detected.code == "EMA203" and r.new_findings == []
    r2 = mutation.judge(m, [Finding("m/t.py", 13, 1, "EMA202", anchor="z")], orig)
    assert r2.detected is None and [f.code for f in r2.wrong_code_nearby] == ["EMA202"]


@pytest.mark.parametrize("op", [op.name for op in OPERATORS])
def test_text_splice_equals_tree_rewrite(op: str) -> None:
    from benchmarks.quality.cst_tools import Context, apply

    snippets = (TRAIN, ACCELERATE, CONTINUE, HAND, AUG, SUM, LERP, SWA, SWA_START, DDP, MOMENTUM)
    for src in snippets:
        for variant in (src, src.replace("\n", "\r\n")):
            ctx = Context.parse(variant)
            for site in by_name(op).find(ctx):
                assert apply(ctx, site.edit) == apply(ctx, site.edit, splice=False)


def test_copy_of_ddp_moves_the_guarded_creation() -> None:
    src = (
        "def setup(model, args):\n"
        "    model_ema = None\n"
        "    if args.model_ema:\n"
        "        model_ema = ModelEma(model, decay=0.9998)\n"
        "    model_without_ddp = model\n"
        "    if args.distributed:\n"
        "        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])\n"
        "    return model, model_ema\n"
    )
    (m,) = _mutants("copy-of-ddp", "import torch\n" + src)
    lines = m.code.splitlines()
    assert lines[4:8] == [
        "    if args.distributed:",
        "        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])",
        "    if args.model_ema:",
        "        model_ema = ModelEma(model, decay=0.9998)",
    ]
    assert m.lines == (8,)


def test_a_file_with_a_bom_is_mutated() -> None:
    src = "\ufeff" + HAND
    ms = mutation.mutants_of("t.py", src, [by_name("eval-removed")])
    assert len(ms) == 1 and ms[0].code.startswith("\ufeff")


def test_hand_written_operators_skip_copies_and_codebooks() -> None:
    copy_only = (
        "def sync(ema, model):\n"
        "    for b_ema, b in zip(ema.buffers(), model.buffers()):\n"
        "        b_ema.copy_(b)\n"
    )
    assert _mutants("out-of-place", copy_only) == []
    vq = (
        "def ema_inplace(old, new, decay):\n    old.lerp_(new, 1 - decay)\n\n\n"
        "class Codebook:\n    def update(self, ema_embed, embed, decay):\n"
        "        ema_embed.mul_(decay).add_(embed, alpha=1 - decay)\n"
    )
    assert _mutants("coefficients-swapped", vq) == [] and _mutants("out-of-place", vq) == []


def test_cpu_operator_skips_copies_of_dicts_and_lists() -> None:
    src = (
        "import copy\n\n\ndef f(model, device):\n"
        "    ema_params = copy.deepcopy(list(model.parameters()))\n"
        "    ema_state = copy.deepcopy(model.state_dict())\n"
        "    return ema_params, ema_state, model.to(device)\n"
    )
    assert _mutants("copy-on-cpu", src) == []
