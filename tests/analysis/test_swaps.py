"""store/copy_to/restore swaps and whether they are undone, without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.training.swaps import WeightSwaps
from tests.analysis.helpers import context

HEADER = """
from diffusers.training_utils import EMAModel

def fit(unet, loader, opt, args, evaluate):
    ema = EMAModel(unet.parameters())
    for epoch in range(3):
        for b in loader:
            unet(b).loss.backward()
            opt.step()
"""


def swaps(body: str):
    ctx = context(HEADER + body)
    return ctx, ctx.get(WeightSwaps).swaps


def test_missing_restore_in_the_training_loop() -> None:
    _, [swap] = swaps(
        "        ema.store(unet.parameters())\n"
        "        ema.copy_to(unet.parameters())\n"
        "        evaluate(unet)\n"
    )
    assert swap.missing and swap.back_to_training and swap.skipped_by is None


def test_restore_under_the_same_condition_covers() -> None:
    _, [swap] = swaps(
        "        if args.use_ema:\n"
        "            ema.store(unet.parameters())\n"
        "            ema.copy_to(unet.parameters())\n"
        "        evaluate(unet)\n"
        "        if args.use_ema:\n"
        "            ema.restore(unet.parameters())\n"
    )
    assert not swap.missing and swap.skipped_by is None


def test_continue_or_other_condition_skips_the_restore() -> None:
    ctx, [swap] = swaps(
        "        ema.store(unet.parameters())\n"
        "        ema.copy_to(unet.parameters())\n"
        "        if evaluate(unet) is None:\n"
        "            continue\n"
        "        ema.restore(unet.parameters())\n"
    )
    assert ctx.code(swap.skipped_by).strip() == "continue"
    _, [swap] = swaps(
        "        ema.store(unet.parameters())\n"
        "        ema.copy_to(unet.parameters())\n"
        "        if args.log:\n"
        "            ema.restore(unet.parameters())\n"
    )
    assert swap.skipped_by is not None


def test_after_training_is_not_back_to_training() -> None:
    _, [swap] = swaps(
        "    ema.store(unet.parameters())\n    ema.copy_to(unet.parameters())\n    evaluate(unet)\n"
    )
    assert swap.missing and not swap.back_to_training


def test_copy_to_without_store_is_not_a_swap() -> None:
    _, found = swaps("    ema.copy_to(unet.parameters())\n")
    assert found == []


def test_swap_ins_name_the_live_model_and_where_it_holds_the_average() -> None:
    source = """
from torch_ema import ExponentialMovingAverage
from diffusers.training_utils import EMAModel

def fit(net, unet, loader, evaluate):
    ema = ExponentialMovingAverage(net.parameters(), decay=0.999)
    ema2 = EMAModel(unet.parameters())
    with ema.average_parameters():
        evaluate(net)
    evaluate(net)
    ema2.copy_to(unet.parameters())
    evaluate(unet)
    ema2.restore(unet.parameters())
    evaluate(unet)
"""
    ctx = context(source)
    found = ctx.get(WeightSwaps).swap_ins
    assert [ctx.code(s.model) for s in found] == ["net", "unet"]
    evaluations = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "evaluate"]
    held = [[s.holds(ctx.index, c) for c in evaluations] for s in found]
    assert held == [[True, False, False, False], [False, False, True, False]]
