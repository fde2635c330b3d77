"""Walking a repository skips what git ignores and the usual run-record folders, as ruff
does; exclude patterns have gitignore semantics."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ema_lint.config import Overrides, Settings
from ema_lint.discovery import discover
from tests.samples import BAD


def _git_init(folder: Path) -> None:
    subprocess.run(["git", "init", "-q", str(folder)], check=True)


@pytest.fixture
def repo(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("git is not installed")
    home = project.parent / "home"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    _git_init(project)
    (project / "train.py").write_text(BAD)
    return project


def _found(root: Path, *args: Path, **overrides) -> set[str]:
    settings = Settings(Overrides(**overrides))
    return {p.relative_to(root).as_posix() for p in discover(list(args) or [root], settings).files}


def test_gitignored_folders_are_not_checked_or_fixed(run, repo: Path) -> None:
    (repo / ".gitignore").write_text("outputs/\n*.gen.py\n")
    run_record = repo / "outputs" / "2024-01-01" / "train.py"
    run_record.parent.mkdir(parents=True)
    run_record.write_text(BAD)
    (repo / "model.gen.py").write_text(BAD)
    result = run("--fix", "--unsafe-fixes", ".", cwd=repo)
    assert run_record.read_text() == BAD
    assert (repo / "model.gen.py").read_text() == BAD
    assert "0.999" in (repo / "train.py").read_text()
    assert "outputs" not in result.out


def test_nested_gitignore_and_negation(repo: Path) -> None:
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / ".gitignore").write_text("*_tmp.py\n")
    (repo / "pkg" / ".gitignore").write_text("!keep_tmp.py\nsub/\n")
    for name in ("a_tmp.py", "pkg/keep_tmp.py", "pkg/b_tmp.py", "pkg/sub/x.py", "pkg/y.py"):
        (repo / name).write_text(BAD)
    assert _found(repo) == {"train.py", "pkg/keep_tmp.py", "pkg/y.py"}


def test_info_exclude_and_global_excludes(repo: Path) -> None:
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("local_only.py\n")
    global_file = Path.home() / ".config" / "git" / "ignore"
    global_file.parent.mkdir(parents=True)
    global_file.write_text("scratch/\n")
    (repo / "scratch").mkdir()
    (repo / "scratch" / "s.py").write_text(BAD)
    (repo / "local_only.py").write_text(BAD)
    assert _found(repo) == {"train.py"}


def test_global_excludes_file_from_git_config(repo: Path) -> None:
    custom = Path.home() / "my-ignores"
    custom.write_text("mine.py\n")
    subprocess.run(
        ["git", "config", "--global", "core.excludesFile", str(custom)], check=True, cwd=repo
    )
    (repo / "mine.py").write_text(BAD)
    assert _found(repo) == {"train.py"}


def test_walk_from_a_subfolder_applies_the_outer_gitignore(repo: Path) -> None:
    (repo / ".gitignore").write_text("pkg/gen/\n")
    (repo / "pkg" / "gen").mkdir(parents=True)
    (repo / "pkg" / "gen" / "g.py").write_text(BAD)
    (repo / "pkg" / "m.py").write_text(BAD)
    assert _found(repo, repo / "pkg") == {"pkg/m.py"}


def test_no_respect_gitignore_flag_and_setting(run, repo: Path) -> None:
    (repo / ".gitignore").write_text("ignored.py\n")
    (repo / "ignored.py").write_text(BAD)
    assert "ignored.py" not in run("--no-cache", ".", cwd=repo).out
    assert "ignored.py" in run("--no-cache", "--no-respect-gitignore", ".", cwd=repo).out
    (repo / "pyproject.toml").write_text("[tool.ema-lint]\nrespect-gitignore = false\n")
    assert "ignored.py" in run("--no-cache", ".", cwd=repo).out
    assert "ignored.py" not in run("--no-cache", "--respect-gitignore", ".", cwd=repo).out


def test_a_file_named_on_the_command_line_is_checked_even_if_ignored(run, repo: Path) -> None:
    (repo / ".gitignore").write_text("ignored.py\n")
    (repo / "ignored.py").write_text(BAD)
    assert "ignored.py:" in run("--no-cache", "ignored.py", cwd=repo).out


def test_gitignore_outside_a_repository_applies_below_the_walked_folder(project: Path) -> None:
    (project / "train.py").write_text(BAD)
    (project / ".gitignore").write_text("skip.py\n")
    (project / "skip.py").write_text(BAD)
    assert _found(project) == {"train.py"}


def test_run_record_folders_are_excluded_by_default(project: Path) -> None:
    (project / "train.py").write_text(BAD)
    for folder in ("outputs/2024-01-01/10-00-00/.hydra", "wandb/run-1/files/code", "multirun"):
        (project / folder).mkdir(parents=True)
        (project / folder / "config.py").write_text(BAD)
    record = project / "outputs" / "2024-01-01" / "10-00-00" / ".hydra" / "config.yaml"
    record.write_text("a: 1\n")
    (project / ".venv" / "lib").mkdir(parents=True)
    (project / ".venv" / "lib" / "x.py").write_text(BAD)
    assert _found(project) == {"train.py"}


@pytest.mark.parametrize(
    "pattern", ["**/outputs/**", "./outputs", "/outputs", "outputs/", "outputs"]
)
def test_exclude_patterns_have_gitignore_semantics(project: Path, pattern: str) -> None:
    (project / "train.py").write_text(BAD)
    (project / "outputs" / "run").mkdir(parents=True)
    (project / "outputs" / "run" / "x.py").write_text(BAD)
    assert _found(project, extend_exclude=[pattern]) == {"train.py"}


def test_anchored_exclude_keeps_a_deeper_folder_of_the_same_name(project: Path) -> None:
    (project / "pkg" / "outputs").mkdir(parents=True)
    (project / "pkg" / "outputs" / "heads.py").write_text(BAD)
    (project / "outputs").mkdir()
    (project / "outputs" / "x.py").write_text(BAD)
    assert _found(project, extend_exclude=["./outputs"]) == {"pkg/outputs/heads.py"}


def test_exclude_negation_keeps_a_file(project: Path) -> None:
    (project / "gen").mkdir()
    for name in ("a.py", "keep.py"):
        (project / "gen" / name).write_text(BAD)
    found = _found(project, extend_exclude=["gen/*.py", "!gen/keep.py"])
    assert found == {"gen/keep.py"}
