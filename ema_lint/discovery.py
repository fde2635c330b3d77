"""Which files a run looks at: the paths given, directories walked, excludes applied.

Paths named on the command line are always checked (unless ``--force-exclude``, which the
pre-commit hooks use so that ``exclude`` holds there too); files found by walking a
directory are checked when they have a known suffix, are regular files (a FIFO or a device
named ``x.py`` would block the run; named on the command line, one is refused with a
message), and no exclude pattern matches them or a folder above them. Walking also skips
what git ignores (``.gitignore``, ``.git/info/exclude``, the global excludes file; see
``gitignore.py``) unless ``respect-gitignore`` is off. A file reached twice (through a
symbolic link) is checked once. Unreadable folders, missing paths and broken links are
reported, never fatal; links to folders are not followed (so link loops cannot trap the
walk).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .config import Settings
from .gitignore import GitIgnore, absolute

# Python files, and the files that ema_lint.sources reads (notebooks, YAML configs).
SUFFIXES = (".py", ".pyi", ".ipynb", ".yaml", ".yml")


@dataclass
class Discovery:
    files: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    # The os.stat() of each file as the walk saw it (None: it could not be read), so that
    # the cache's stat index need not ask again.
    stats: list[os.stat_result | None] = field(default_factory=list)
    # Files reached by walking through a symbolic link to a file outside the folder walked:
    # fixed only when named themselves.
    outside_links: set[Path] = field(default_factory=set)


def discover(
    paths: Iterable[Path],
    settings: Settings,
    *,
    force_exclude: bool = False,
    suffixes: tuple[str, ...] = SUFFIXES,
) -> Discovery:
    found = Discovery()
    seen: dict[tuple[int, int] | Path, int] = {}

    def add(path: Path, walked: Path | None = None) -> None:
        info: os.stat_result | None
        try:
            info = os.lstat(path) if walked is not None else os.stat(path)
            if walked is not None and stat.S_ISLNK(info.st_mode):
                info = os.stat(path)
                if _points_outside(path, walked):
                    found.outside_links.add(path)
        except OSError as error:
            if walked is not None:  # a broken link or a link loop met while walking
                found.errors.append(f"{path}: cannot read: {error.strerror or error}")
                return
            info = None
            key: tuple[int, int] | Path = Path(os.path.abspath(path))
        else:
            if walked is not None and not stat.S_ISREG(info.st_mode):
                return
            # The same file through another path (a symbolic link) is checked once, under
            # its own name rather than a link's.
            key = (info.st_dev, info.st_ino)
        where = seen.get(key)
        if where is None:
            seen[key] = len(found.files)
            found.files.append(path)
            found.stats.append(info)
        elif os.path.islink(found.files[where]) and not os.path.islink(path):
            found.files[where] = path
            found.stats[where] = info

    for root in paths:
        kind, problem = path_kind(root)
        if problem is not None:
            found.errors.append(f"{root}: {problem}")
            continue
        if kind == "file":
            if force_exclude and excluded_with_parents(root, settings):
                continue
            add(root)
            continue
        if force_exclude and excluded_with_parents(root, settings):
            continue

        git = GitIgnore() if settings.respects_gitignore(root) else None

        def on_error(error: OSError) -> None:
            found.errors.append(f"{error.filename}: cannot read directory: {error.strerror}")

        for directory, dirnames, filenames in os.walk(root, onerror=on_error):
            base = Path(directory)
            dirnames[:] = sorted(
                d for d in dirnames if not settings.excluded(base / d, is_dir=True)
            )
            candidates = sorted(name for name in filenames if name.endswith(suffixes))
            if git is not None:
                where = absolute(base)
                dirnames[:] = git.kept(where, dirnames, are_dirs=True)
                candidates = git.kept(where, candidates, are_dirs=False) if candidates else []
            for name in settings.kept_files(base, candidates) if candidates else ():
                add(base / name, walked=root)
    return found


_SPECIAL = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def path_kind(path: Path) -> tuple[str, str | None]:
    """What a path named on the command line is: ``("file", None)``, ``("dir", None)``, or
    a kind with the one-line reason it is not checked. A FIFO would block the run and a
    device (``/dev/zero``) never ends: only regular files are read."""
    try:
        info = os.stat(path)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
            return "unreadable", f"cannot read: {error.strerror or error}"
        if not os.path.lexists(path):
            return "missing", "no such file or directory"
        return "missing", "not a file or directory (a broken link?)"
    if stat.S_ISREG(info.st_mode):
        return "file", None
    if stat.S_ISDIR(info.st_mode):
        return "dir", None
    what = next((name for test, name in _SPECIAL if test(info.st_mode)), "a special file")
    return "special", f"not a regular file ({what}): not read"


def _points_outside(link: Path, root: Path) -> bool:
    real, top = os.path.realpath(link), os.path.realpath(root)
    try:
        return os.path.commonpath([real, top]) != top
    except ValueError:  # another drive
        return True


def excluded_with_parents(path: Path, settings: Settings) -> bool:
    """Is ``path``, or a folder above it, excluded? (``--force-exclude`` on a named path.)"""
    current = path
    for _ in range(len(path.parts)):
        if settings.excluded(current):
            return True
        if current.parent == current:
            break
        current = current.parent
    return False
