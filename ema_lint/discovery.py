"""Which files a run looks at: the paths given, directories walked, excludes applied.

Paths named on the command line are always checked (unless ``--force-exclude``, which the
pre-commit hooks use so that ``exclude`` holds there too); files found by walking a
directory are checked when they have a known suffix and no exclude pattern matches them or
a folder above them. Unreadable folders and missing paths are reported, never fatal.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .config import Settings

# Python files, and the files that ema_lint.sources reads (notebooks, YAML configs).
SUFFIXES = (".py", ".pyi", ".ipynb", ".yaml", ".yml")


@dataclass
class Discovery:
    files: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def discover(
    paths: Iterable[Path],
    settings: Settings,
    *,
    force_exclude: bool = False,
    suffixes: tuple[str, ...] = SUFFIXES,
) -> Discovery:
    found = Discovery()
    seen: set[Path] = set()

    def add(path: Path) -> None:
        key = Path(os.path.abspath(path))
        if key not in seen:
            seen.add(key)
            found.files.append(path)

    for root in paths:
        if not os.path.lexists(root):
            found.errors.append(f"{root}: no such file or directory")
            continue
        if root.is_file() or (not root.is_dir() and root.exists()):
            if force_exclude and _excluded_with_parents(root, settings):
                continue
            add(root)
            continue
        if not root.is_dir():
            found.errors.append(f"{root}: not a file or directory (a broken link?)")
            continue
        if force_exclude and _excluded_with_parents(root, settings):
            continue

        def on_error(error: OSError) -> None:
            found.errors.append(f"{error.filename}: cannot read directory: {error.strerror}")

        for directory, dirnames, filenames in os.walk(root, onerror=on_error):
            base = Path(directory)
            dirnames[:] = sorted(d for d in dirnames if not settings.excluded(base / d))
            for name in sorted(filenames):
                if not name.endswith(suffixes):
                    continue
                path = base / name
                if settings.excluded(path):
                    continue
                add(path)
    return found


def _excluded_with_parents(path: Path, settings: Settings) -> bool:
    current = path
    for _ in range(len(path.parts)):
        if settings.excluded(current):
            return True
        if current.parent == current:
            break
        current = current.parent
    return False
