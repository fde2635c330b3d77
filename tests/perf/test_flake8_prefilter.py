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


@pytest.mark.parametrize(
    ("argv", "selected"),
    [
        ([], True),  # flake8's default selection includes every plugin's codes
        (["--select", "EMA"], True),
        (["--select", "F,W"], False),
        (["--select", "E9,F"], False),
        (["--select", "E"], True),  # flake8 matches prefixes: E selects EMA101 too
        (["--select", "F", "--extend-select", "EMA101"], True),
        (["--extend-ignore", "EMA"], False),
        (["--ignore", "EMA1"], True),  # EMA9xx is still reported
    ],
)
def test_the_plugin_does_nothing_when_flake8_reports_no_ema_code(
    argv: list[str], selected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flake8.options.parse_args import parse_args

    monkeypatch.setattr(EmaLintChecker, "_selected", True)
    monkeypatch.setattr(EmaLintChecker, "_settings", None)
    parse_args(["--isolated", *argv, "train.py"])  # as flake8 does: calls parse_options
    assert EmaLintChecker._selected is selected
    found = list(EmaLintChecker(None, "train.py", BAD.splitlines(keepends=True)).run())
    assert bool(found) is selected
