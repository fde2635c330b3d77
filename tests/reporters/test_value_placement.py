"""A bad value is reported where its literal is written; the uses are related locations."""

from __future__ import annotations

import ema_lint
from ema_lint.reporters.json_format import diagnostic_to_dict

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
