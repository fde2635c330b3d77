"""The analysis does work in proportion to the module, not to its square.

Counted, not timed: a module that repeats a training file N times must ask each analysis
question about N times as often. A per-object or per-update scan of the whole module shows
up here as work growing with N squared (each of N updates walking the callers of N copies).
"""

from __future__ import annotations

import pytest

from benchmarks.training_file import TRAINING_FILE
from ema_lint import engine
from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.training.loops import TrainingLoops
from ema_lint.file_settings import FileSettings
from ema_lint.registry import default_codes


def _counted(monkeypatch: pytest.MonkeyPatch, cls: type, name: str, counts: dict) -> None:
    original = getattr(cls, name)

    def counting(self, *args, **kwargs):
        counts[name] = counts.get(name, 0) + 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counting)


def _work(copies: int) -> dict[str, int]:
    settings = FileSettings(codes=sorted(default_codes()), prefilter=False)
    counts: dict[str, int] = {}
    with pytest.MonkeyPatch.context() as patch:
        _counted(patch, TrainingLoops, "function_of", counts)
        _counted(patch, AveragingObjects, "for_expression", counts)
        _counted(patch, ValueResolver, "lineage", counts)
        analysis = engine.analyze(TRAINING_FILE * copies, "train.py", settings)
    counts["findings"] = len(analysis.diagnostics)
    return counts


def test_questions_grow_with_the_module_not_its_square() -> None:
    small, large = _work(2), _work(8)
    assert large["findings"] == 4 * small["findings"] > 0
    for question in ("function_of", "for_expression", "lineage"):
        # 4x the module: about 4x the questions (quadratic work would be 16x).
        assert large[question] <= 6 * small[question], (question, small, large)
