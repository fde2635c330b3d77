"""The decay of a hand-written update, read from its coefficients, independent of any rule."""

from __future__ import annotations

import pytest

from ema_lint.analysis.objects.apis import Side
from ema_lint.analysis.objects.averaging import Use
from ema_lint.analysis.training.decays import DecaySettings

HEADER = "import copy\nimport torch\n"


def hand(source: str):
    from tests.analysis.helpers import context

    ctx = context(HEADER + source)
    return [s for s in ctx.get(DecaySettings).settings if s.hand_made]


def _loop(update: str, ema: str = "ema", before: str = "") -> str:
    return (
        "def train(model, loader, opt):\n"
        f"    {ema} = copy.deepcopy(model).requires_grad_(False)\n"
        "    for step, x in enumerate(loader):\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        f"{before}"
        "        with torch.no_grad():\n"
        f"            for e, p in zip({ema}.parameters(), model.parameters()):\n"
        f"                {update}\n"
    )


@pytest.mark.parametrize(
    ("update", "decay", "side", "editable"),
    [
        ("e.mul_(D).add_(p, alpha=1 - D)", 0.9, Side.OLD, True),
        ("e.lerp_(p, 1 - D)", 0.9, Side.OLD, True),
        ("e.lerp_(p, 0.25)", 0.75, Side.NEW, True),
        ("e.copy_(D * e + (1 - D) * p)", 0.9, Side.OLD, True),
        ("e.data = 0.8 * e.data + 0.2 * p.data", 0.8, Side.OLD, False),
        ("e.mul_(0.9).add_(p, alpha=1 - 0.9)", 0.9, Side.OLD, False),
    ],
)
def test_each_form_gives_the_weight_on_the_old_average(update, decay, side, editable) -> None:
    (setting,) = hand("D = 0.9\n" + _loop(update))
    assert setting.decay == pytest.approx(decay)
    assert setting.weight.side is side
    assert setting.editable is editable
    assert (setting.partner is None) is editable
    assert setting.use is Use.EVAL and setting.interval == 1


def test_values_through_defaults_calls_and_argparse() -> None:
    found = hand(
        "import argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--ema-decay', type=float, default=0.97)\n"
        "args = p.parse_args()\n"
        "@torch.no_grad()\n"
        "def update_ema(ema, model, decay=0.95):\n"
        "    for e, q in zip(ema.parameters(), model.parameters()):\n"
        "        e.mul_(decay).add_(q, alpha=1 - decay)\n"
        + _loop("e.lerp_(p, 1 - args.ema_decay)")
        + "        update_ema(ema, model)\n"
    )
    assert sorted(round(s.decay, 6) for s in found) == [0.95, 0.97]
    assert any(s.value.via == "--ema-decay default" for s in found)


def test_unambiguous_only() -> None:
    # Coefficients that do not sum to one, an unknown value, a schedule: nothing to judge.
    assert hand("D = 0.9\n" + _loop("e.mul_(D).add_(p, alpha=0.5)")) == []
    assert (
        hand(_loop("e.mul_(d).add_(p, alpha=1 - d)", before="        d = schedule[step]\n")) == []
    )


def test_guard_around_the_update_is_folded_in() -> None:
    source = (
        _loop("e.lerp_(p, 0.01)")
        .replace(
            "        with torch.no_grad():\n",
            "        if step % 10 == 0:\n          with torch.no_grad():\n",
        )
        .replace("            for e", "              for e")
        .replace("                e.lerp_", "                  e.lerp_")
    )
    (setting,) = hand(source)
    assert setting.interval == 10 and setting.step_decay == pytest.approx(0.99**0.1)


@pytest.mark.parametrize(
    ("ema", "update", "use"),
    [
        ("target_net", "e.mul_(0.9).add_(p, alpha=0.1)", Use.TARGET),
        ("shadow", "e.mul_(1 - tau).add_(p, alpha=tau)", Use.TARGET),
        ("teacher", "e.mul_(0.996).add_(p, alpha=0.004)", Use.TEACHER),
    ],
)
def test_use_from_the_object_and_the_coefficient(ema, update, use) -> None:
    (setting,) = hand("tau = 0.005\n" + _loop(update, ema=ema))
    assert setting.use is use


def test_not_weights_are_not_settings() -> None:
    assert (
        hand(
            "class Opt(torch.optim.Optimizer):\n"
            "    def step(self):\n"
            "        for p in self.params:\n"
            "            m = self.state[p]['exp_avg']\n"
            "            m.mul_(0.9).add_(p.grad, alpha=0.1)\n"
            "avg_loss = 0.0\n"
            "for loss in losses:\n"
            "    avg_loss = 0.9 * avg_loss + 0.1 * loss\n"
        )
        == []
    )
