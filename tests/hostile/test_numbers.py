"""Numbers that hang or crash: folding is bounded, and inf, nan and huge integers are unknown.

``decay=10**10**10`` once never finished (the constant folder computed the power), and
``1e309``, a 400-digit integer, ``0x1`` in ``1 - decay`` and ``inf``/``nan`` defaults
crashed the decay rules (EMA902). The resolver treats what no float holds as unknown, so
no rule has to expect a non-finite value.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.analysis.test_values import resolve

HEADER = "from timm.utils import ModelEmaV2\n"
BIG = "1" + "0" * 400

SOURCES = {
    "power-tower": HEADER + "ema = ModelEmaV2(model, decay=10**10**10)\n",
    "huge-product": HEADER + "ema = ModelEmaV2(model, decay=7**5000 * 3**5000)\n",
    "float-overflow": HEADER + "ema = ModelEmaV2(model, decay=1e309)\n",
    "negative-overflow": HEADER + "ema = ModelEmaV2(model, decay=1 - 1e309)\n",
    "400-digits": HEADER + f"ema = ModelEmaV2(model, decay={BIG})\n",
    "400-digits-sum": HEADER + f"D = {BIG}\nema = ModelEmaV2(model, decay=1 - D)\n",
    "float-inf": HEADER + "ema = ModelEmaV2(model, decay=float('inf'))\n",
    "float-nan": HEADER + "ema = ModelEmaV2(model, decay=float('nan'))\n",
    "argparse-inf": (
        "import argparse\n" + HEADER + "p = argparse.ArgumentParser()\n"
        "p.add_argument('--ema-decay', type=float, default='inf')\n"
        "p.add_argument('--epochs', type=int, default=float('nan'))\n"
        "args = p.parse_args()\n"
        "ema = ModelEmaV2(model, decay=args.ema_decay)\n"
    ),
    "lightning-inf-epochs": (
        "import lightning.pytorch as pl\n"
        "from lightning.pytorch.callbacks import StochasticWeightAveraging\n"
        "trainer = pl.Trainer(max_epochs=1e309, callbacks=[\n"
        "    StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=0.5)])\n"
    ),
    "hex-one-in-complement": (
        "import copy\nimport torch\n\ndecay = 0.99\nema_model = copy.deepcopy(model)\n"
        "for step in range(10):\n"
        "    loss.backward()\n"
        "    optimizer.step()\n"
        "    with torch.no_grad():\n"
        "        for ema_p, p in zip(ema_model.parameters(), model.parameters()):\n"
        "            ema_p.mul_(decay).add_(p, alpha=1 - (0x1 - (1 - decay)))\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_extreme_numbers_never_crash_a_rule(run, project: Path, name: str) -> None:
    (project / "train.py").write_text(SOURCES[name])
    result = run("--unsafe-fixes", "--fix", "train.py", cwd=project)
    assert "EMA902" not in result.out and "Traceback" not in result.out + result.err
    assert result.code in (0, 1), result.out
    compile((project / "train.py").read_text(), "train.py", "exec")


def test_hex_one_is_read_as_one_in_the_complement(run, project: Path) -> None:
    (project / "train.py").write_text(SOURCES["hex-one-in-complement"])
    result = run("train.py", cwd=project)
    # A 10-update loop: the horizon is judged against the run (EMA104), with the value read
    # as 0.99, so the hex one was read as one.
    assert "EMA decay 0.99 averages over about 100 updates" in result.out


@pytest.mark.parametrize(
    "expression",
    [
        "10 ** 10 ** 10",
        "2 ** 100000",
        "(-3) ** 99999",
        "7 ** 5000 * 3 ** 5000",
        "1e308 * 10",
        "1e309",
        "-1e309",
        "1e309 - 1e309",
        "float('inf')",
        "float('nan')",
        "math.exp(1000)",
        " * ".join([BIG] * 11),
    ],
)
def test_folding_is_bounded_and_non_finite_is_unknown(expression: str) -> None:
    assert resolve("import math\n", expression) is None


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 ** 10", 1024),
        ("0.5 ** (1 / 2000)", 0.5 ** (1 / 2000)),
        ("1 - 0x1 / 0x10", 1 - 1 / 16),
        ("2 ** -5000", 0.0),
        ("1 ** 10 ** 10", 1),
        ("(-1) ** 10 ** 10", 1),
        ("0 ** 10 ** 10", 0),
        ("10 ** 300 * 10 ** 300", 10**600),
    ],
)
def test_bounded_folding_still_folds_what_is_small(expression: str, expected) -> None:
    value = resolve("", expression)
    assert value is not None and value.value == expected


def test_a_large_but_bounded_integer_has_no_float_number() -> None:
    value = resolve("", BIG)
    assert value is not None and value.number is None
    assert math.isfinite(resolve("", "10 ** 300").number)
