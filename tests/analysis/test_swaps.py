"""store/copy_to/restore swaps and whether they are undone, without any rule."""

from __future__ import annotations

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
