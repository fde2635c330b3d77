"""Lightning hooks across modules: the Trainer that accumulates, written in the script that
imports a callback, is named in the callback's finding; a base class of another module sets
the average a subclass's hook updates, and the reverse; editing the script re-lints."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import ema_lint
from ema_lint.analysis.project import resolution
from tests.fixture_cases import ROOT

PROJECT = ROOT / "fixtures" / "projects" / "lightning_base_chain"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    resolution.clear()


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "proj"
    shutil.copytree(PROJECT, copy)
    return copy


def _lint(path: Path) -> list:
    return ema_lint.check(path.read_bytes(), path=str(path), select=["EMA202"])


def test_the_trainer_in_an_importing_script_is_named(project: Path) -> None:
    (found,) = _lint(project / "lit" / "callbacks.py")
    assert "accumulates gradients over 4" in found.message
    assert "accumulate_grad_batches=4 in train.py:6" in found.message
    assert [(Path(r.path).name, r.line) for r in found.related] == [("train.py", 6)]


def test_without_an_accumulating_trainer_the_message_stays_conditional(project: Path) -> None:
    script = project / "train.py"
    script.write_text(script.read_text().replace("accumulate_grad_batches=4", "precision=16"))
    (found,) = _lint(project / "lit" / "callbacks.py")
    assert "harmless only while the Trainer's accumulate_grad_batches is 1" in found.message
    assert found.related == ()


def test_base_and_subclass_in_two_modules_cite_each_other(project: Path) -> None:
    (in_base,) = _lint(project / "lit" / "base.py")
    assert "set as self.ema by its subclass Denoiser in lit/models.py" in in_base.message
    in_models = _lint(project / "lit" / "models.py")
    assert [d.line for d in in_models] == [20]
    assert "by its base class HoldsAverage in lit/base.py" in in_models[0].message


def test_a_subclass_setting_a_meter_is_no_average(project: Path) -> None:
    models = project / "lit" / "models.py"
    models.write_text(models.read_text().replace("self.ema = EMA(net, beta=0.9999)", "pass"))
    assert _lint(project / "lit" / "base.py") == []
