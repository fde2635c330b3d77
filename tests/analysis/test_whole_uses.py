"""Uses of an averaged copy as a whole model, and filters of hand-written updates, without
any rule."""

from __future__ import annotations

import pytest

from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.objects.filters import FilteredUpdates
from ema_lint.analysis.objects.whole_uses import WholeUses
from tests.analysis.helpers import context

HEADER = """
import copy
import torch

@torch.no_grad()
def update_ema(ema_model, model, decay=0.999):
    for e, p in zip(ema_model.parameters(), model.parameters()):
        e.lerp_(p, 1 - decay)

def train(model, loader, optimizer, validate):
    ema_model = copy.deepcopy(model)
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()
        update_ema(ema_model, model)
"""


def _use(tail: str, returned: bool = True):
    ctx = context(HEADER + tail)
    objects = ctx.get(AveragingObjects)
    obj = next(o for o in objects.objects if o.name == "ema_model")
    return ctx.get(WholeUses).first(obj, returned=returned)


@pytest.mark.parametrize(
    ("tail", "what"),
    [
        ("    ema_model.eval()\n", "eval"),
        ("    return ema_model(x)\n", "called"),
        ("    validate(ema_model, loader)\n", "passed"),
        ('    torch.save(ema_model.state_dict(), "ema.pt")\n', "saved"),
        ("    return ema_model\n", "returned"),
    ],
)
def test_uses_as_a_whole_model(tail: str, what: str) -> None:
    use = _use(tail)
    assert use is not None and use.what == what


def test_the_update_and_copies_are_no_uses() -> None:
    assert _use("    other = copy.deepcopy(ema_model)\n") is None
    assert _use("    print(len(list(ema_model.parameters())))\n") is None


def test_a_return_counts_only_when_asked() -> None:
    assert _use("    return ema_model\n", returned=False) is None


def _parts_only(tail: str) -> bool:
    ctx = context(HEADER + tail)
    obj = next(o for o in ctx.get(AveragingObjects).objects if o.name == "ema_model")
    return ctx.get(WholeUses).parts_only(obj)


def test_parts_only() -> None:
    assert _parts_only('    torch.save(ema_model[0].state_dict(), "head.pt")\n')
    assert _parts_only("    validate(ema_model.encoder, loader)\n")
    assert not _parts_only("    validate(ema_model.encoder, loader)\n    return ema_model\n")
    assert not _parts_only('    torch.save(ema_model.state_dict(), "ema.pt")\n')
    assert not _parts_only("    pass\n")  # no use at all: nothing says only a part is used


def _filters(body: str):
    ctx = context("import torch\n\ndef update(ema, model, flag, d):\n" + body)
    return ctx.get(FilteredUpdates).filters


def test_copy_before_continue_writes_the_skipped_entries() -> None:
    (found,) = _filters(
        "    for (n, e), p in zip(ema.named_parameters(), model.parameters()):\n"
        '        if "bn" in n:\n'
        "            e.copy_(p)\n"
        "            continue\n"
        "        e.lerp_(p, 1 - d)\n"
    )
    assert found.kind == "name" and found.copied


def test_an_option_in_the_condition_makes_the_filter_optional() -> None:
    (found,) = _filters(
        "    for (n, e), p in zip(ema.named_parameters(), model.parameters()):\n"
        '        if flag and "bn" in n:\n'
        "            continue\n"
        "        e.lerp_(p, 1 - d)\n"
    )
    assert found.optional and not found.copied


def test_a_buffers_loop_does_not_write_skipped_parameters() -> None:
    (found,) = _filters(
        "    for (n, e), p in zip(ema.named_parameters(), model.parameters()):\n"
        '        if "weight" in n:\n'
        "            e.lerp_(p, 1 - d)\n"
        "    for e, b in zip(ema.buffers(), model.buffers()):\n"
        "        e.copy_(b)\n"
    )
    assert not found.copied
