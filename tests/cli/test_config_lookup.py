"""Configuration lookup is memoized per folder: each pyproject.toml is read once per run,
however many folders and files lie below it, and the nearest file still wins everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ema_lint import config as config_module
from ema_lint.config import (
    ConfigFinder,
    Overrides,
    Settings,
    _Excludes,
    find_config_file,
)
from ema_lint.discovery import discover
from tests.samples import BAD


@pytest.fixture
def toml_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    reads: list[Path] = []
    real = config_module._load_toml

    def counting(path: Path):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(config_module, "_load_toml", counting)
    return reads


def _tree(root: Path, folders: int = 6, files: int = 4) -> None:
    for i in range(folders):
        folder = root / f"pkg{i}" / "deep" / "deeper"
        folder.mkdir(parents=True)
        for j in range(files):
            (folder / f"m{j}.py").write_text("x = 1\n")


def test_each_config_file_is_read_once_per_run(tmp_path: Path, toml_reads, run) -> None:
    # A pyproject.toml without the section (skipped) above one with it: both read once.
    (tmp_path / "pyproject.toml").write_text('[tool.ema-lint]\nignore = ["EMA101"]\n')
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    _tree(project)
    (project / "pkg0" / "train.py").write_text(BAD)
    result = run(".", "--no-cache", cwd=project)
    assert result.code == 0, result.out  # EMA101 ignored by the outer file
    assert sorted(toml_reads) == [project / "pyproject.toml", tmp_path / "pyproject.toml"]


def test_two_projects_in_one_run_keep_their_own_configs(tmp_path: Path, run) -> None:
    # Excludes are relative to their own file's folder; options and ignores stay apart.
    for name, text in (
        ("a", '[tool.ema-lint]\nextend-exclude = ["gen/out"]\n'),
        ("b", '[tool.ema-lint]\n[tool.ema-lint.per-file-ignores]\n"gen/y.py" = ["EMA101"]\n'),
    ):
        gen = tmp_path / name / "gen" / "out"
        gen.mkdir(parents=True)
        (tmp_path / name / "pyproject.toml").write_text(text)
        (gen / "x.py").write_text(BAD)
        (tmp_path / name / "gen" / "y.py").write_text(BAD)
        (tmp_path / name / "train.py").write_text(BAD)
    result = run("a", "b", "--no-cache", "--output-format", "concise", cwd=tmp_path)
    found = sorted(line.split(":")[0] for line in result.out.splitlines() if "EMA101" in line)
    assert found == ["a/gen/y.py", "a/train.py", "b/gen/out/x.py", "b/train.py"]


def test_a_nested_config_governs_its_folder_only(tmp_path: Path, run) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ema-lint]\nselect = ["EMA2"]\n')
    inner = tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    (inner / "ema-lint.toml").write_text('select = ["EMA1"]\n')
    (tmp_path / "outer" / "a.py").write_text(BAD)
    (inner / "b.py").write_text(BAD)
    (inner / "sub").mkdir()
    (inner / "sub" / "c.py").write_text(BAD)
    result = run(".", "--no-cache", "--output-format", "concise", cwd=tmp_path)
    found = sorted(line.split(":")[0] for line in result.out.splitlines() if "EMA101" in line)
    assert found == ["outer/inner/b.py", "outer/inner/sub/c.py"]


def test_the_finder_agrees_with_a_fresh_lookup_in_any_order(tmp_path: Path) -> None:
    (tmp_path / "ema-lint.toml").write_text("")
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "a" / "b" / "pyproject.toml").write_text("[tool.ema-lint]\n")
    (tmp_path / "a" / "pyproject.toml").write_text("[tool.black]\n")
    folders = [tmp_path / "a" / "b" / "c", tmp_path, tmp_path / "a", tmp_path / "a" / "b"]
    finder = ConfigFinder()
    for folder in [*folders, *reversed(folders)]:
        assert finder.find(folder) == find_config_file(folder)
    assert finder.find(tmp_path / "a") == tmp_path / "ema-lint.toml"
    assert finder.find(tmp_path / "a" / "b" / "c") == tmp_path / "a" / "b" / "pyproject.toml"


def test_discovery_reads_each_config_once(tmp_path: Path, toml_reads) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ema-lint]\nextend-exclude = ["pkg1/deep"]\n')
    _tree(tmp_path)
    settings = Settings(Overrides())
    found = discover([tmp_path], settings)
    assert len(found.files) == 5 * 4 and not any("pkg1" in str(p) for p in found.files)
    assert toml_reads == [tmp_path / "pyproject.toml"]


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(st.text(alphabet="ab*?.[]", min_size=1, max_size=6), max_size=4),
    relative=st.text(alphabet="ab/.", min_size=1, max_size=8).filter(
        lambda r: all(part not in ("", ".", "..") for part in r.split("/"))
    ),
    is_dir=st.booleans(),
)
def test_bare_name_patterns_judge_by_name_as_the_whole_path_would(
    patterns: list[str], relative: str, is_dir: bool
) -> None:
    """The shortcut (no path resolved for name-only patterns) gives gitignore's verdict."""
    from pathspec import GitIgnoreSpec

    excludes = _Excludes(patterns)
    assert excludes.by_name_only
    name = relative.rsplit("/", 1)[-1]
    lines = [p for p in patterns if p.strip()]
    parts = relative.split("/")
    # git excludes a path when the path or any folder above it matches.
    prefixes = ["/".join(parts[: i + 1]) + "/" for i in range(len(parts) - 1)]
    expected = any(
        GitIgnoreSpec.from_lines(lines).match_file(p)
        for p in [*prefixes, relative + ("/" if is_dir else "")]
    )
    above = any(_Excludes(patterns).matches(part, None, True) for part in parts[:-1])
    assert (above or excludes.matches(name, None, is_dir)) == expected


def test_kept_files_gives_the_verdicts_of_excluded(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ema-lint]\nextend-exclude = ["gen_*.py", "a/b/x.py", "a/c"]\n'
    )
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "c").mkdir()
    (tmp_path / "a" / "b" / "ema-lint.toml").write_text('extend-exclude = ["y.py"]\n')
    names = ["x.py", "y.py", "gen_1.py", "z.py", "c"]
    for folder in (tmp_path, tmp_path / "a", tmp_path / "a" / "b"):
        settings = Settings(Overrides(extend_exclude=["z.py"]))
        expected = [n for n in names if not settings.excluded(folder / n, is_dir=False)]
        assert Settings(Overrides(extend_exclude=["z.py"])).kept_files(folder, names) == expected
    kept = Settings(Overrides()).kept_files(tmp_path / "a" / "b", names)
    # The nearest file governs alone: a/b's excludes y.py, the outer patterns do not apply.
    assert kept == ["x.py", "gen_1.py", "z.py", "c"]
    kept = Settings(Overrides()).kept_files(tmp_path / "a", names)
    assert kept == ["x.py", "y.py", "z.py"]  # gen_*.py by name, c by "a/c" (relative to root)


def test_folders_reached_through_a_link_are_judged_by_their_real_place(tmp_path: Path, run) -> None:
    real = tmp_path / "real"
    (real / "sub" / "skip").mkdir(parents=True)
    (real / "pyproject.toml").write_text('[tool.ema-lint]\nextend-exclude = ["sub/skip"]\n')
    (real / "sub" / "skip" / "a.py").write_text(BAD)
    (real / "sub" / "b.py").write_text(BAD)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "pyproject.toml").write_text("[tool.ema-lint]\n")
    (outside / "link").symlink_to(real, target_is_directory=True)
    result = run("link", "--no-cache", "--output-format", "concise", cwd=outside)
    found = sorted(line.split(":")[0] for line in result.out.splitlines() if "EMA101" in line)
    assert found == ["link/sub/b.py"]
