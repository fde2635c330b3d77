"""Weight copies that copy nothing: rebound loop variables and replaced state_dict entries."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.objects.copies import NoOpCopies
from tests.analysis.helpers import context


def code(node) -> str:
    return cst.Module([]).code_for_node(node).strip()


def test_named_pairs_rebound() -> None:
    ctx = context(
        "def sync(ema, net):\n"
        "    for (n, ema_p), (_, p) in zip(ema.named_parameters(), net.named_parameters()):\n"
        "        ema_p = p\n"
    )
    [rebind] = ctx.get(NoOpCopies).rebinds
    assert (rebind.target, rebind.source) == ("ema_p", "p")


def test_state_dict_entries_replaced_and_never_loaded() -> None:
    ctx = context(
        "def sync(ema, net):\n"
        "    ema_sd = ema.state_dict()\n"
        "    for k, v in net.state_dict().items():\n"
        "        ema_sd[k] = v.clone()\n"
        "def sync_loaded(ema, net):\n"
        "    ema_sd = ema.state_dict()\n"
        "    for k, v in net.state_dict().items():\n"
        "        ema_sd[k] = v.clone()\n"
        "    ema.load_state_dict(ema_sd)\n"
        "def not_an_average(first, net):\n"
        "    sd = first.state_dict()\n"
        "    for k, v in net.state_dict().items():\n"
        "        sd[k] = v.clone()\n"
    )
    assert [code(a) for a in ctx.get(NoOpCopies).entry_copies] == ["ema_sd[k] = v.clone()"]
