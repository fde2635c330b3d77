"""A fix keeps what the user had: owner, group, mode, hard links, edits saved meanwhile,
and files outside the tree reached through a symbolic link.

An atomic replace makes a new file: fixing as root gave a user's file to root, and a file
with two names lost one of them. An edit saved while ``--fix`` ran was overwritten. A link
in the tree to a file elsewhere got that file rewritten.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ema_lint import engine, writer
from tests.samples import BAD

FIXED = "decay=0.999)"
NOBODY = 65534


def _fix(run, cwd: Path, *paths: str):
    return run("--fix", "--unsafe-fixes", "-j1", *paths, cwd=cwd)


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="needs root")
@pytest.mark.parametrize("mode", [0o640, 0o664, 0o600])
def test_a_fix_as_root_keeps_the_owner_group_and_mode(run, project: Path, mode: int) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)
    result = _fix(run, project, "train.py")
    assert result.code == 0, result.out
    assert FIXED in path.read_text()
    info = path.stat()
    assert (info.st_uid, info.st_gid) == (NOBODY, NOBODY)
    assert stat.S_IMODE(info.st_mode) == mode


@pytest.mark.skipif(not hasattr(os, "chown") or os.geteuid() != 0, reason="needs root")
def test_an_owner_the_copy_cannot_keep_is_refused(run, project: Path, monkeypatch) -> None:
    # As a user fixing another user's group-writable file: chown is not allowed.
    path = project / "train.py"
    path.write_text(BAD)
    os.chown(path, NOBODY, NOBODY)
    path.chmod(0o666)

    def refuse(fd, uid, gid):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchown", refuse)
    result = _fix(run, project, "train.py")
    assert result.code == 2
    assert "cannot write the fix: replacing it would change its owner" in result.out
    assert path.read_text() == BAD
    assert not [p for p in project.iterdir() if p.name.endswith(writer.TEMP_SUFFIX)]


def test_a_file_with_hard_links_is_not_split(run, project: Path) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    other = project / "copy_of_train.py"
    os.link(path, other)
    result = _fix(run, project, "train.py")
    assert result.code == 2
    assert "train.py: cannot write the fix: it has 2 hard links" in result.out
    assert "train.py:3:31: EMA101" in result.out  # reported as it stands
    assert os.path.samefile(path, other)
    assert path.read_text() == BAD


@pytest.mark.parametrize("jobs", ["-j1", "-j2"])
def test_an_edit_saved_while_fixing_is_not_overwritten(
    run, project: Path, monkeypatch, jobs: str
) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    (project / "other.py").write_text(BAD)
    edit = BAD + "# saved by the user while the fix ran\n"
    real_fix = engine.fix

    def fix_while_the_user_saves(data, display, settings, **kwargs):
        fixed = real_fix(data, display, settings, **kwargs)
        if display.endswith("train.py"):
            path.write_text(edit)
        return fixed

    monkeypatch.setattr(engine, "fix", fix_while_the_user_saves)
    result = run("--fix", "--unsafe-fixes", jobs, "--no-cache", ".", cwd=project)
    assert result.code == 2
    assert "train.py: cannot write the fix: it changed on disk while it was being fixed" in (
        result.out
    )
    assert path.read_text() == edit
    assert FIXED in (project / "other.py").read_text()  # the others are still fixed


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links")
def test_a_link_to_a_file_outside_the_tree_is_fixed_only_when_named(run, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    elsewhere = tmp_path / "elsewhere"
    tree.mkdir()
    elsewhere.mkdir()
    (tree / "pyproject.toml").write_text("[tool.ema-lint]\n")
    (elsewhere / "shared.py").write_text(BAD)
    (tree / "shared.py").symlink_to(elsewhere / "shared.py")
    (tree / "sub").mkdir()
    (tree / "sub" / "inside.py").write_text(BAD)
    (tree / "alias.py").symlink_to("sub/inside.py")  # inside the tree: one file, fixed
    walked = _fix(run, tree, ".")
    assert walked.code == 2
    assert "shared.py: cannot write the fix: a symbolic link to a file outside" in walked.out
    assert (elsewhere / "shared.py").read_text() == BAD
    assert FIXED in (tree / "sub" / "inside.py").read_text()
    assert (tree / "shared.py").is_symlink()
    named = _fix(run, tree, "shared.py")
    assert named.code == 0, named.out
    assert FIXED in (elsewhere / "shared.py").read_text()
    assert (tree / "shared.py").is_symlink()


def test_a_killed_fix_leaves_no_stale_temporary_files(run, project: Path) -> None:
    path = project / "train.py"
    path.write_text(BAD)
    (project / "sub").mkdir()
    (project / "sub" / "model.py").write_text(BAD)
    stale = [
        project / f".train.py.abcd1234{writer.TEMP_SUFFIX}",
        project / "sub" / f".model.py.k9_x0zzz{writer.TEMP_SUFFIX}",
    ]
    fresh = project / f".train.py.fresh123{writer.TEMP_SUFFIX}"  # a writer running now
    foreign = [
        project / "notes.ema-lint.tmp",  # not a name the writer makes
        project / f".train.py.abcd1234{writer.TEMP_SUFFIX}.bak",
    ]
    for p in [*stale, fresh, *foreign]:
        p.write_text("partial")
    old = os.stat(path).st_mtime - 2 * writer.STALE_SECONDS
    for p in [*stale, *foreign]:
        os.utime(p, (old, old))
    linked = project / f".link.py.abcd1234{writer.TEMP_SUFFIX}"
    linked.symlink_to(path)
    os.utime(linked, (old, old), follow_symlinks=False)
    checked = run("-j1", ".", cwd=project)  # a run that writes nothing removes nothing
    assert all(p.exists() for p in stale)
    assert checked.code == 1
    result = _fix(run, project, ".")
    assert result.code == 0, result.out
    assert not any(p.exists() for p in stale)
    assert fresh.exists() and all(p.exists() for p in foreign)
    assert linked.is_symlink() and FIXED in path.read_text()
