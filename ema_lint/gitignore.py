"""What git ignores: ``.gitignore`` files, ``.git/info/exclude`` and the global excludes file.

A directory walk skips what git would not track, as ruff's does, so that run records and
copies (Hydra's ``outputs/``, ``wandb/``) are neither checked nor fixed. Patterns are read
with gitignore semantics (``pathspec``): each ``.gitignore`` applies to its own folder and
below, a deeper file's patterns win over an outer one's, the last matching pattern wins
(``!`` re-includes). ``.git/info/exclude`` and the global file (``core.excludesFile``, else
``$XDG_CONFIG_HOME/git/ignore``) apply from the repository's root, and only inside one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

# (folder the patterns are relative to, the patterns): outermost first.
_Layer = tuple[str, "GitIgnoreSpec"]


def _read_spec(path: str) -> GitIgnoreSpec | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    # Imported here: a tree with no ignore file (a run's start, a warm run) needs none.
    from pathspec import GitIgnoreSpec

    spec = GitIgnoreSpec.from_lines(lines)
    return spec if len(spec) else None


def repository_root(folder: str) -> str | None:
    """The nearest folder at or above ``folder`` (absolute) holding ``.git`` (a folder or,
    in a worktree or submodule, a file)."""
    current = folder
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def global_excludes_file(repository: str) -> str | None:
    """git's global ignore file: ``core.excludesFile``, else the XDG default."""
    import subprocess  # only inside a repository

    try:
        done = subprocess.run(
            ["git", "config", "--get", "core.excludesFile"],
            cwd=repository,
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        configured = done.stdout.strip() if done.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        configured = ""
    if configured:
        return os.path.expanduser(configured)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "git", "ignore")


def _git_dir(repository: str) -> str:
    """The repository's git folder (``.git``, or where a ``gitdir:`` file points)."""
    dot_git = os.path.join(repository, ".git")
    if os.path.isfile(dot_git):
        try:
            with open(dot_git, encoding="utf-8") as handle:
                first = handle.readline().strip()
        except OSError:
            return dot_git
        if first.startswith("gitdir:"):
            target = first[len("gitdir:") :].strip()
            return os.path.normpath(os.path.join(repository, target))
    return dot_git


class GitIgnore:
    """The ignore verdicts of one walk, with each folder's ``.gitignore`` read once."""

    def __init__(self) -> None:
        self._layers: dict[str, tuple[_Layer, ...]] = {}
        self._repositories: dict[str, tuple[_Layer, ...]] = {}

    def _repository_layers(self, repository: str) -> tuple[_Layer, ...]:
        found = self._repositories.get(repository)
        if found is None:
            layers: list[_Layer] = []
            candidates = [global_excludes_file(repository)]
            git_dir = _git_dir(repository)
            candidates.append(os.path.join(git_dir, "info", "exclude"))
            for candidate in candidates:
                spec = _read_spec(candidate) if candidate else None
                if spec is not None:
                    layers.append((repository, spec))
            found = self._repositories[repository] = tuple(layers)
        return found

    def layers(self, folder: str) -> tuple[_Layer, ...]:
        """The patterns that apply in ``folder`` (absolute, normalised): outermost first."""
        found = self._layers.get(folder)
        if found is not None:
            return found
        if os.path.lexists(os.path.join(folder, ".git")):
            inherited = self._repository_layers(folder)  # a repository's root: a new start
        else:
            parent = os.path.dirname(folder)
            if parent == folder:
                inherited = ()
            elif parent in self._layers or repository_root(parent) is not None:
                inherited = self.layers(parent)
            else:
                inherited = ()  # outside any repository: only the walked tree's own files
        spec = _read_spec(os.path.join(folder, ".gitignore"))
        found = (*inherited, (folder, spec)) if spec is not None else inherited
        self._layers[folder] = found
        return found

    def ignored(self, path: str, *, is_dir: bool) -> bool:
        """Would git ignore ``path`` (absolute, normalised), judged by its folder's layers?"""
        return _verdict(self.layers(os.path.dirname(path)), path, is_dir)

    def kept(self, folder: str, names: Sequence[str], *, are_dirs: bool) -> list[str]:
        """The names in ``folder`` (absolute, normalised) that git would not ignore."""
        layers = self.layers(folder)
        if not layers:
            return list(names)
        return [
            name for name in names if not _verdict(layers, os.path.join(folder, name), are_dirs)
        ]


def _verdict(layers: Sequence[_Layer], path: str, is_dir: bool) -> bool:
    ignored = False
    for base, spec in layers:
        relative = os.path.relpath(path, base).replace(os.sep, "/")
        if relative.startswith("../"):
            continue
        if is_dir:
            relative += "/"
        result = spec.check_file(relative)
        if result.include is not None:
            ignored = result.include
    return ignored


def absolute(path: Path) -> str:
    """``path`` made absolute and normalised without resolving links (a link is judged by
    where it is, as git does)."""
    return os.path.abspath(path)
