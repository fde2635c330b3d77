"""A bad value is reported where its literal is written; the uses are related locations."""

from __future__ import annotations

from pathlib import Path

import ema_lint
from ema_lint.reporters.json_format import diagnostic_to_dict
from tests.fixture_cases import lint_file

SOURCE = """\
from timm.utils import ModelEmaV2

EMA_DECAY = 0.99


def build(model, other):
    ema = ModelEmaV2(model, decay=EMA_DECAY)
    ema_other = ModelEmaV2(other, decay=EMA_DECAY)
    return ema, ema_other
"""


def test_finding_sits_on_the_literal_with_every_use_related() -> None:
    (finding,) = ema_lint.check(SOURCE, path="train.py", select=["EMA101"])
    assert finding.line == 3
    assert [(r.path, r.line) for r in finding.related] == [("train.py", 7), ("train.py", 8)]
    assert finding.related[0].message == "used here: ema = ModelEmaV2(model, decay=EMA_DECAY)"


def test_json_names_the_related_locations() -> None:
    (finding,) = ema_lint.check(SOURCE, path="train.py", select=["EMA101"])
    related = diagnostic_to_dict(finding)["related"]
    assert [r["line"] for r in related] == [7, 8]


def test_literal_at_the_call_has_no_related_location() -> None:
    source = "from timm.utils import ModelEmaV2\nema = ModelEmaV2(model, decay=0.99)\n"
    (finding,) = ema_lint.check(source, path="train.py", select=["EMA101"])
    assert finding.line == 2 and finding.related == ()


def test_suppression_goes_on_the_literal() -> None:
    silenced = SOURCE.replace("EMA_DECAY = 0.99", "EMA_DECAY = 0.99  # noqa: EMA101")
    assert ema_lint.check(silenced, path="train.py", select=["EMA101"]) == []


def test_a_value_computed_from_a_literal_sits_on_that_literal() -> None:
    source = (
        "import tensorflow as tf\n"
        "\n"
        "rate = 0.01\n"
        "ema = tf.train.ExponentialMovingAverage(decay=1 - rate)\n"
        "exact = tf.train.ExponentialMovingAverage(decay=1 - 0.05)\n"
    )
    first, second = ema_lint.check(source, path="train.py", select=["EMA101"])
    assert first.line == 3 and [r.line for r in first.related] == [4]
    assert second.line == 5 and second.related == ()  # both numbers written at the call


def test_derived_values_and_helper_defaults_name_their_uses() -> None:
    path = Path(__file__).parents[2] / "fixtures" / "EMA101" / "derived_values.py"
    found = {d.line: d for d in lint_file(path) if d.code == "EMA101"}
    assert [r.line for r in found[11].related] == [25]  # DECAY, used by the update
    assert [r.line for r in found[12].related] == [28]  # rate, in ``decay=1 - rate``
    assert [r.line for r in found[13].related] == [29]  # Keras ``ema_momentum=1 - rate``
    helper = found[33].related  # the default of ``update_ema``: the per-step call
    assert [r.line for r in helper] == [45]
    assert helper[0].message == "leaves decay at its default: update_ema(ema, model)"


def test_a_warmup_ceiling_names_the_update_it_feeds() -> None:
    source = (
        "import k_diffusion as K\n"
        "\n"
        "def train(model, model_ema, loader, opt):\n"
        "    sched = K.utils.EMAWarmup(power=2 / 3, max_value=0.9)\n"
        "    for batch in loader:\n"
        "        opt.step()\n"
        "        K.utils.ema_update(model, model_ema, sched.get_value())\n"
    )
    (finding,) = ema_lint.check(source, path="train.py", select=["EMA101"])
    assert finding.line == 4 and [r.line for r in finding.related] == [7]
