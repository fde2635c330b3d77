"""Every front end sees the project: the command (also for modules it does not lint), flake8
on one file, pre-commit's changed files, notebooks, the Python API; the results cache
re-lints an importer when a helper it read changes, and a warm run still parses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ema_lint
from ema_lint.analysis.project import model as project_model
from ema_lint.analysis.project import resolution
from tests.fixture_cases import ROOT
from tests.sources.notebooks import code, lines, notebook

HELPER = textwrap.dedent(
    """
    from copy import deepcopy

    import torch


    class ModelEMA:
        def __init__(self, model, decay=0.9999):
            self.ema = deepcopy(model).eval()
            self.decay = decay

        @torch.no_grad()
        def update(self, model):
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v.mul_(self.decay).add_(msd[k], alpha=1 - self.decay)
    """
)
TRAIN = textwrap.dedent(
    """
    from tools.ema import ModelEMA


    def train(model, loader, optimizer):
        ema = ModelEMA(model, decay=0.9)
        for x, y in loader:
            loss = model(x).sub(y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.update(model)
    """
)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    resolution.clear()
    project_model.forget()
    project_model.STORE.memory.clear()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("")
    (tmp_path / "tools" / "ema.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def _cli(*args: str, cwd: Path) -> list[dict]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ema_lint",
            "check",
            "--isolated",
            "--output-format",
            "json",
            "--exit-zero",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["diagnostics"]


def _codes(found: list[dict]) -> list[tuple[str, str, int]]:
    return sorted((Path(d["path"]).name, d["code"], d["location"]["line"]) for d in found)


def test_changed_files_only_still_read_the_helpers(project: Path) -> None:
    # pre-commit passes the changed file alone; excluded helpers are read all the same.
    found = _cli("--no-cache", "--extend-exclude", "tools", "train.py", cwd=project)
    assert _codes(found) == [("train.py", "EMA101", 6)]
    assert "ModelEMA, defined in tools/ema.py" in found[0]["message"]


def test_flake8_on_one_file_resolves_its_imports(project: Path) -> None:
    pytest.importorskip("flake8")
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select", "EMA", "train.py"],
        capture_output=True,
        text=True,
        cwd=project,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "train.py:6:" in proc.stdout and "EMA101" in proc.stdout


def test_sarif_names_the_helper_as_a_related_location(project: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ema_lint",
            "check",
            "--isolated",
            "--no-cache",
            "--output-format",
            "sarif",
            "--exit-zero",
            "train.py",
        ],
        capture_output=True,
        text=True,
        cwd=project,
        check=False,
    )
    [result] = json.loads(proc.stdout)["runs"][0]["results"]
    [related] = result["relatedLocations"]
    assert related["physicalLocation"]["artifactLocation"]["uri"].endswith("tools/ema.py")
    assert related["physicalLocation"]["region"]["startLine"] == 7
    assert related["message"]["text"] == "ModelEMA, defined in tools/ema.py"


def test_the_python_api_reads_the_project_around_the_path(project: Path) -> None:
    found = ema_lint.check(TRAIN, path=str(project / "train.py"))
    assert [(d.code, d.line) for d in found] == [("EMA101", 6)]
    assert found[0].related and found[0].related[0].path.endswith("ema.py")
    # Without a path there is no project: the class is unknown.
    assert ema_lint.check(TRAIN) == []


def test_a_notebook_resolves_imports_against_its_folder(project: Path) -> None:
    cell = "from tools.ema import ModelEMA\n\nema = ModelEMA(model, decay=0.9)\n"
    path = project / "explore.ipynb"
    path.write_text(json.dumps(notebook(code(lines(cell)))))
    found = ema_lint.check(path.read_bytes(), path=str(path))
    assert [(d.code, d.cell, d.line) for d in found] == [("EMA101", 1, 3)]


def test_editing_a_helper_relints_its_importers(project: Path) -> None:
    args = ("--cache-dir", str(project / "cache"), ".")
    assert _codes(_cli(*args, cwd=project)) == [("train.py", "EMA101", 6)]
    assert _codes(_cli(*args, cwd=project)) == [("train.py", "EMA101", 6)]  # warm
    # The helper no longer averages: ModelEMA is no averaging class, train.py is clean.
    helper = project / "tools" / "ema.py"
    helper.write_text(
        HELPER.replace("v.mul_(self.decay).add_(msd[k], alpha=1 - self.decay)", "pass").replace(
            "deepcopy(model).eval()", "model"
        )
    )

    assert _codes(_cli(*args, cwd=project)) == []
    helper.write_text(HELPER)
    assert _codes(_cli(*args, cwd=project)) == [("train.py", "EMA101", 6)]


_RUN = textwrap.dedent(
    """
    import io, sys
    from ema_lint.cli import main
    out = io.StringIO()
    code = main(sys.argv[1:], stdout=out, stderr=out)
    heavy = sorted(m for m in sys.modules if m == "libcst" or m.startswith("ema_lint.rules."))
    print(code, bool(heavy), out.getvalue().count("EMA101"))
    """
)


def test_a_warm_run_over_a_project_parses_nothing(project: Path) -> None:
    def run() -> str:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _RUN,
                ".",
                "--isolated",
                "--cache-dir",
                str(project / "cache"),
                "--jobs",
                "1",
            ],
            cwd=project,
            capture_output=True,
            text=True,
            check=False,
            env={"PYTHONPATH": str(ROOT), "PATH": ""},
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run() == "1 True 1"
    assert run() == "1 False 1"


def test_import_cycles_and_reexports_are_bounded(tmp_path: Path) -> None:
    (tmp_path / "setup.cfg").write_text("")
    (tmp_path / "a.py").write_text("from b import ModelEMA\nema = 1\n")
    (tmp_path / "b.py").write_text("from a import ModelEMA\nema = 2\n")
    (tmp_path / "c.py").write_text("from a import ModelEMA\n\nema = ModelEMA(model, decay=0.9)\n")
    assert ema_lint.check((tmp_path / "c.py").read_bytes(), path=str(tmp_path / "c.py")) == []
