"""The flake8 plugin: a file without triggers costs a scan of its text and nothing more."""

from __future__ import annotations

import pytest

from ema_lint import engine
from ema_lint.flake8_plugin import EmaLintChecker
from tests.samples import BAD


def _boom(*args, **kwargs):
    raise AssertionError("reached past the pre-filter")


def test_a_file_without_triggers_never_reaches_settings_or_the_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine, "lint", _boom)
    monkeypatch.setattr(EmaLintChecker, "_get_settings", classmethod(_boom))
    lines = ["import torch\n", "schema = torch.zeros(3)  # remain\n"]
    assert list(EmaLintChecker(None, "plain.py", lines).run()) == []


def test_a_file_with_triggers_is_linted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EmaLintChecker, "_settings", None)
    found = list(EmaLintChecker(None, "train.py", BAD.splitlines(keepends=True)).run())
    assert [(line, col, text.split()[0]) for line, col, text, _ in found] == [(3, 30, "EMA101")]
