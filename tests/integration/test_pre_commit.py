"""The pre-commit hooks, driven by the real pre-commit against a throw-away repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.samples import BAD

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(),
    reason="needs git and a git checkout of ema-lint",
)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _try_repo(repo: Path, hook: str, home: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("pre_commit")
    env = dict(os.environ, PRE_COMMIT_HOME=str(home), NO_COLOR="1")
    env.pop("PRE_COMMIT_COLOR", None)
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), hook, "--all-files"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "test@example.invalid")
    _git(tmp_path, "config", "user.name", "test")
    # An unsafe-fixable finding (EMA101 is unsafe) is reported but not fixed by the hook;
    # use the project configuration to allow unsafe fixes, as a team would opt in.
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\nunsafe-fixes = true\n")
    (tmp_path / "train.py").write_text(BAD)
    _git(tmp_path, "add", ".")
    return tmp_path


def test_check_hook_fails_and_names_the_finding(repo: Path, home: Path) -> None:
    proc = _try_repo(repo, "ema-lint", home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "train.py:3:31: EMA101" in proc.stdout
    assert (repo / "train.py").read_text() == BAD


def test_fix_hook_repairs_the_file(repo: Path, home: Path) -> None:
    proc = _try_repo(repo, "ema-lint-fix", home)
    # pre-commit fails a hook that modified files, and the file is repaired.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "files were modified by this hook" in proc.stdout
    assert (repo / "train.py").read_text() == BAD.replace("0.99)", "0.999)")
    again = _try_repo(repo, "ema-lint-fix", home)
    assert again.returncode == 0, again.stdout + again.stderr
