"""Without a cache, the workers of a run share summaries in a scratch folder for that run only."""

import shutil
import tempfile
from pathlib import Path

from ema_lint.analysis.project import model
from ema_lint.config import Settings
from ema_lint.runner import Mode, check_files

PROJECT = Path(__file__).parents[2] / "fixtures" / "projects" / "helper_bugs"


def _findings(files, jobs):
    outcomes = check_files(files, Settings(), Mode(), jobs=jobs, cache=None)
    return sorted((o.path, d.code, d.line) for o in outcomes for d in o.diagnostics)


def test_the_scratch_folder_goes_with_the_run_and_findings_stay(tmp_path, monkeypatch):
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    files = sorted(project.rglob("*.py"))
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_root))
    one = _findings(files, 1)
    two = _findings(files, 2)
    assert one and one == two  # the shared summaries change nothing found
    assert list(scratch_root.iterdir()) == []  # nothing left behind
    # this process does not keep writing there
    assert not str(model.STORE.directory or "").startswith(str(scratch_root))
