"""The documented Python API (docs/integrations/api.md): check() and fix()."""

from __future__ import annotations

from pathlib import Path

import pytest

import ema_lint
from ema_lint import Applicability, Diagnostic, FixResult, Position
from ema_lint.sources import yaml_nodes
from tests.samples import BAD, GOOD

ROOT = Path(__file__).resolve().parents[2]


def test_check_returns_positions_and_fixes() -> None:
    (d,) = ema_lint.check(BAD, path="train.py")
    assert isinstance(d, Diagnostic)
    assert (d.code, d.name, d.path) == ("EMA101", "ema-decay-out-of-range", "train.py")
    assert (d.start, d.end) == (Position(3, 31), Position(3, 35))
    assert (d.line, d.column, d.cell) == (3, 31, None)
    assert d.fixable and d.fix is not None and d.fix.applicability is Applicability.UNSAFE
    assert ema_lint.check(GOOD) == []


def test_selection_and_options() -> None:
    assert ema_lint.check(BAD, ignore=["EMA1"]) == []
    assert ema_lint.check(BAD, select=["ema-decay-out-of-range"]) != []
    assert ema_lint.check(BAD, options={"EMA101": {"min": 0.95}}) == []
    assert ema_lint.check(BAD, options={"ema-decay-out-of-range": {"min": "0.95"}}) == []
    with pytest.raises(ValueError):
        ema_lint.check(BAD, options={"EMA999": {"min": 1}})
    with pytest.raises(ValueError):
        ema_lint.check(BAD, options={"EMA101": {"nope": 1}})
    with pytest.raises(ValueError):
        ema_lint.check(BAD, select=["EMA999"])


def test_fix_applies_safe_fixes_only_unless_unsafe() -> None:
    result = ema_lint.fix(BAD)
    assert isinstance(result, FixResult)
    assert (result.source, result.applied, result.changed) == (BAD, 0, False)
    assert [d.code for d in result.diagnostics] == ["EMA101"]
    result = ema_lint.fix(BAD, unsafe=True)
    assert result.source == BAD.replace("0.99)", "0.999)") and result.applied == 1
    assert result.changed and result.diagnostics == []


def test_fix_keeps_the_input_type() -> None:
    result = ema_lint.fix(BAD.encode(), unsafe=True)
    assert result.source == BAD.replace("0.99)", "0.999)").encode()


def test_bad_source_is_a_finding_not_an_exception() -> None:
    (d,) = ema_lint.check("from timm.utils import ModelEmaV2\nx = (\n")
    assert d.code == "EMA901"
    result = ema_lint.fix("import timm.utils.ModelEmaV2\nx = (\n", unsafe=True)
    assert [d.code for d in result.diagnostics] == ["EMA901"] and not result.changed


def test_config_file_is_read_only_when_named(tmp_path: Path) -> None:
    config = tmp_path / "ema-lint.toml"
    config.write_text('[per-file-ignores]\n"train.py" = ["EMA101"]\n')
    assert ema_lint.check(BAD, path="train.py", config=config) == []
    assert ema_lint.check(BAD, path="other.py", config=config) != []
    assert ema_lint.check(BAD, path=str(tmp_path / "train.py")) != []


def test_yaml_needs_no_extra_and_a_broken_install_is_a_finding(monkeypatch) -> None:
    text = "ema:\n  _target_: timm.utils.ModelEmaV2\n  decay: 0.99\n"
    assert [d.code for d in ema_lint.check(text, path="c.yaml")] == ["EMA101"]
    monkeypatch.setattr(yaml_nodes, "_yaml", lambda: None)
    (d,) = ema_lint.check(text, path="c.yaml")
    assert d.code == "EMA901"
    assert d.message == "not read: PyYAML is not installed (pip install PyYAML)"


def test_the_package_is_typed() -> None:
    assert (ROOT / "ema_lint" / "py.typed").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'ema_lint = ["py.typed"]' in pyproject
    assert ema_lint.check.__annotations__["return"] == "list[Diagnostic]"
    assert ema_lint.fix.__annotations__["return"] == "FixResult"
