"""The results cache never removes what it did not write.

``--cache-dir`` and ``$EMA_LINT_CACHE_DIR`` may name a shared folder (``.``, ``~/.cache``):
old folders and files of the user in it, beside it and even inside the cache's own folder
must survive every command, links and special files in it are never followed, and a stat
index that points outside the cache is ignored.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from ema_lint import cache as cache_module
from ema_lint.cache import Cache, StatIndex
from tests.samples import BAD

AGES_AGO = time.time() - 400 * 86400  # older than any pruning limit
COMMANDS = (
    ("check",),
    ("check", "--fix", "--unsafe-fixes"),
    ("check", "--diff"),
    ("check", "--output-format", "json"),
    ("rules",),
    ("explain", "EMA101"),
)


def _plant(folder: Path) -> None:
    """Old folders and files of someone else's, as a repository or ~/.cache holds them."""
    for name in ("src", "configs", "pip", "huggingface", ".git"):
        (folder / name / "deep").mkdir(parents=True)
        (folder / name / "deep" / "keep.txt").write_text(f"{name} data\n")
    (folder / "notes.txt").write_text("mine\n")
    # Named like a build folder of the cache: still the user's.
    (folder / f"1.0-{'a' * 12}-libcst1.1.0-py311").mkdir()
    (folder / f"1.0-{'a' * 12}-libcst1.1.0-py311" / "results.csv").write_text("1,2\n")


def _age(folder: Path) -> None:
    for directory, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            os.utime(os.path.join(directory, name), (AGES_AGO, AGES_AGO), follow_symlinks=False)
    os.utime(folder, (AGES_AGO, AGES_AGO))


def _snapshot(folder: Path) -> dict[str, object]:
    """Every path below ``folder`` except the cache's own, with its content or link target."""
    seen: dict[str, object] = {}
    for directory, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".ema_lint_cache"]
        for name in [*dirnames, *filenames]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                seen[path] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                seen[path] = ("file", Path(path).read_bytes(), info.st_mtime)
            else:
                seen[path] = ("other", stat.S_IFMT(info.st_mode))
    return seen


@pytest.fixture
def always_prune(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "PRUNE_EVERY", -1.0)  # every run prunes


@pytest.mark.parametrize("how", ["flag-dot", "flag", "environment"])
def test_unrelated_folders_in_and_beside_the_cache_dir_survive_every_command(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, always_prune: None, how: str
) -> None:
    project = tmp_path / "repo"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.ema-lint]\n")
    _plant(project)
    shared = tmp_path / "home" / ".cache"
    shared.mkdir(parents=True)
    _plant(shared)
    (tmp_path / "home" / "beside.txt").write_text("next to the cache\n")
    flags: tuple[str, ...] = ()
    if how == "flag-dot":
        flags = ("--cache-dir", ".")
    elif how == "flag":
        flags = ("--cache-dir", str(shared))
    else:
        monkeypatch.setenv("EMA_LINT_CACHE_DIR", str(shared))
    if hasattr(os, "mkfifo"):
        os.mkfifo(shared / "a-pipe")
    _age(tmp_path)
    for command in COMMANDS:
        (project / "train.py").write_text(BAD)
        os.utime(project / "train.py", (AGES_AGO, AGES_AGO))
        before = _snapshot(tmp_path)
        extra = flags if command[0] == "check" else ()
        args = (*command, *extra, "-j1", "train.py") if command[0] == "check" else command
        result = run(*args, cwd=project)
        assert "Traceback" not in result.out + result.err, result.err
        after = _snapshot(tmp_path)
        lost = {p: v for p, v in before.items() if p != str(project / "train.py")}
        assert {p: after.get(p) for p in lost} == lost, command
        # Nothing of the cache's lands among the user's files either: no tag that makes a
        # backup skip the repository, no .gitignore that hides it from git.
        for folder in (project, shared):
            assert not (folder / "CACHEDIR.TAG").exists()
            assert not (folder / ".gitignore").exists()
    home = project if how == "flag-dot" else shared
    assert (home / ".ema_lint_cache" / "CACHEDIR.TAG").is_file()  # the cache went there


def test_the_cache_s_own_folder_prunes_only_its_own_layout(
    tmp_path: Path, always_prune: None
) -> None:
    home = tmp_path / "cache"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep\n")
    old = Cache(home, build=f"0.1-{'b' * 12}-libcst1.1.0-py311")
    old.put("ab" * 32, "k", [])
    assert old.root is not None
    (old.root / "mine.txt").write_text("a user's file in an old build folder\n")
    (old.root / "ab" / "notes").write_text("not an entry\n")
    # A link named like a build folder, and a link inside a build folder, to the outside.
    linked = home / f"0.2-{'c' * 12}-libcst1.1.0-py311"
    linked.symlink_to(outside, target_is_directory=True)
    (old.root / "cd").symlink_to(outside, target_is_directory=True)
    if hasattr(os, "mkfifo"):
        os.mkfifo(old.root / "ef")
    _age(tmp_path)
    current = Cache(home, build=f"0.3-{'d' * 12}-libcst1.1.0-py311")
    current.put("12" * 32, "k", [])
    current.prune()
    # The old build's entry and stamp went; everything else stays, and so does its folder.
    assert not (old.root / "ab" / ("ab" * 31)).exists()
    assert (old.root / "mine.txt").read_text().startswith("a user's")
    assert (old.root / "ab" / "notes").is_file()
    assert linked.is_symlink() and (outside / "precious.txt").read_text() == "keep\n"
    assert (old.root / "cd").is_symlink()
    assert current.get("12" * 32, "k", "p") == []


def test_a_stat_index_pointing_outside_the_cache_is_ignored(
    run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StatIndex, "RACY_SECONDS", 0.0)  # trust a file written just now
    project = tmp_path / "repo"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.ema-lint]\n")
    (project / "train.py").write_text(BAD)
    first = run("-j1", "train.py", cwd=project)
    store = Cache(project / ".ema_lint_cache")
    index = StatIndex(store)
    [(where, entry)] = index.entries.items()
    [digest] = [v.partition(":")[2] for v in [entry[1]] if v.startswith("sha:")]
    real_entry = store._entry_path(digest)
    assert real_entry is not None
    # A victim outside the cache that reads as a valid entry of a forged "digest".
    target = tmp_path / "victim" / "entry"
    target.parent.mkdir()
    forged = "./" + os.path.relpath(target, store.root)  # root / "./" / "../../victim/entry"
    document = json.loads(real_entry.read_bytes())
    document["content"] = forged
    document["entries"] = {k: [] for k in document["entries"]}  # "no findings"
    target.write_text(json.dumps(document))
    os.utime(target, (AGES_AGO, AGES_AGO))
    index.entries[where] = [entry[0], f"sha:{forged}"]
    index.dirty = True
    index.save()
    again = run("-j1", "train.py", cwd=project)
    assert (again.code, again.out) == (first.code, first.out)  # not the forged "no findings"
    assert os.stat(target).st_mtime == pytest.approx(AGES_AGO)  # never touched


def test_which_folder_the_cache_owns(tmp_path: Path) -> None:
    mine = tmp_path / "empty-but-mine"
    mine.mkdir()
    assert cache_module.find_home(tmp_path / "new") == tmp_path / "new"  # it will create it
    assert cache_module.find_home(mine) == mine / ".ema_lint_cache"  # a folder you made
    named = tmp_path / ".ema_lint_cache"
    named.mkdir()
    assert cache_module.find_home(named) == named  # empty, and of the cache's own name
    (tmp_path / "file").write_text("x")
    assert cache_module.find_home(tmp_path / "file") is None
    store = Cache(mine, build="b")
    store.put("ab" * 32, "k", [])
    assert (mine / ".ema_lint_cache" / "CACHEDIR.TAG").read_bytes().startswith(b"Signature")
    assert sorted(p.name for p in mine.iterdir()) == [".ema_lint_cache"]  # no temp left
    (tmp_path / "plain").mkdir()
    plain = stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert stat.S_IMODE((mine / ".ema_lint_cache").stat().st_mode) == plain  # not private


def test_project_summaries_live_in_the_build_folder_and_are_pruned_with_it(tmp_path: Path) -> None:
    """The project model's summaries sit in the cache's own build folder, under a layout
    the pruner knows, so an old build's summaries go with it and nothing else does."""
    from ema_lint.cache import SUMMARIES, Cache

    cache = Cache(tmp_path / "c", build="ema-lint-0.1.0-0123456789ab-libcst1.1-py311")
    folder = cache.summaries_folder()
    assert folder is not None and folder.parent == cache.root and folder.name == SUMMARIES
    entry = folder / "ab" / ("c" * 62 + ".json")
    entry.parent.mkdir(parents=True)
    entry.write_text("{}")
    keep = folder / "ab" / "notes.txt"
    keep.write_text("mine")
    old = time.time() - 400 * 86400
    os.utime(entry, (old, old))
    cache.prune(now=time.time() + 2 * 86400)
    assert not entry.exists()
    assert keep.read_text() == "mine"
