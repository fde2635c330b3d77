"""Which file of the project an import names, as Python would find it when the code runs.

A file's imports are looked up against its *project roots*, in the order Python's path
would hold them for the usual ways of running training code:

- the folder above the file's top package (the chain of folders with ``__init__.py``), so
  ``from utils.ema import ModelEMA`` inside a package resolves like an installed package;
- the script's own folder (``python train.py`` puts it first on ``sys.path``);
- the project root (the nearest folder with ``pyproject.toml``, ``setup.cfg``, ``setup.py``
  or ``.git``), its ``src/`` folder, and the folders a ``src = [...]`` setting of
  ``[tool.ema-lint]`` names (relative to the root, like ruff's ``src``);
- last, for a namespace package (no ``__init__.py``), the folder above the ancestor of the
  file named like the import's first part (``yolov6.utils.ema`` from ``yolov6/core/``).

Relative imports (``from .nn import update_ema``, ``from ..utils import x``) are resolved
from the file's package. Names that resolve to no file of the project (the standard library,
third-party packages) are left to the API table. Every lookup is memoized per folder, so a
run asks the file system once per folder and name.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import lru_cache

from ema_lint.files import read_regular

_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
MAX_PARENTS = 32
MAX_PROJECT_FILES = 3000
_SKIP_DIRS = {
    "__pycache__",
    "node_modules",
    "site-packages",
    "build",
    "dist",
    "venv",
    ".venv",
    "env",
    ".tox",
    ".git",
    ".ema_lint_cache",
}


@dataclass(frozen=True)
class ModuleFile:
    """A module of the project: its file and the dotted name it is imported by."""

    path: str
    name: str  # "utils.ema"; "" when the file is not importable under a dotted name

    @property
    def package(self) -> str:
        """The package a relative import of this module starts from."""
        if os.path.basename(self.path) == "__init__.py":
            return self.name
        return self.name.rpartition(".")[0]


def _isfile(path: str) -> bool:
    return os.path.isfile(path)


@lru_cache(maxsize=4096)
def _is_package(folder: str) -> bool:
    return _isfile(os.path.join(folder, "__init__.py"))


@lru_cache(maxsize=4096)
def project_root(folder: str) -> str | None:
    """The nearest folder at or above ``folder`` holding a project marker."""
    current = folder
    for _ in range(MAX_PARENTS):
        if any(os.path.exists(os.path.join(current, m)) for m in _MARKERS):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent
    return None


@lru_cache(maxsize=256)
def _configured_src(root: str) -> tuple[str, ...]:
    path = os.path.join(root, "pyproject.toml")
    try:  # Python 3.11+ (imported here: most lookups never read a configuration)
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(read_regular(path).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return ()
    tool = data.get("tool")
    section = tool.get("ema-lint") if isinstance(tool, dict) else None
    src = section.get("src") if isinstance(section, dict) else None
    if not isinstance(src, list):
        return ()
    return tuple(
        os.path.normpath(os.path.join(root, item)) for item in src if isinstance(item, str)
    )


def _top_of_package(folder: str) -> tuple[str, list[str]]:
    """The folder above the top package holding ``folder``, and the package parts."""
    parts: list[str] = []
    current = folder
    for _ in range(MAX_PARENTS):
        if not _is_package(current):
            break
        parts.append(os.path.basename(current))
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return current, list(reversed(parts))


@lru_cache(maxsize=4096)
def roots_for(folder: str) -> tuple[str, ...]:
    """The folders absolute imports of a file in ``folder`` are looked up in, in order."""
    found: list[str] = []
    top, _ = _top_of_package(folder)
    for candidate in (top, folder):
        if candidate not in found:
            found.append(candidate)
    root = project_root(folder)
    if root is not None:
        for candidate in (root, os.path.join(root, "src"), *_configured_src(root)):
            if candidate not in found and os.path.isdir(candidate):
                found.append(candidate)
    return tuple(found)


def module_for_path(path: str) -> ModuleFile:
    """The module a file is, with the dotted name its package chain gives it."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    _, parts = _top_of_package(folder)
    stem = os.path.basename(path).rsplit(".", 1)[0]
    if stem != "__init__":
        parts = [*parts, stem]
    return ModuleFile(path, ".".join(parts))


@lru_cache(maxsize=8192)
def _find_in(root: str, dotted: str) -> str | None:
    # Each folder on the way is listed once (``torch.nn.functional`` in a project without
    # a ``torch`` folder costs one look at the root's listing, not a stat per root and name).
    parts = dotted.split(".")
    folder = root
    for part in parts[:-1]:
        if part not in _entries(folder):
            return None
        folder = os.path.join(folder, part)
    last = parts[-1]
    entries = _entries(folder)
    base = os.path.join(folder, last)
    if last + ".py" in entries and _isfile(base + ".py"):
        return base + ".py"
    init = os.path.join(base, "__init__.py")
    if last in entries and "__init__.py" in _entries(base) and _isfile(init):
        return init
    return None


@lru_cache(maxsize=16384)
def _entries(folder: str) -> frozenset[str]:
    """The names in ``folder`` (empty if it is no readable folder)."""
    try:
        return frozenset(os.listdir(folder))
    except OSError:
        return frozenset()


def absolute_name(importer: ModuleFile, module: str) -> str | None:
    """The absolute dotted name of ``module`` as written in ``importer`` (``.nn``, ``..a``)."""
    return _relative_name(importer.package, module)


def _relative_name(package_name: str, module: str) -> str | None:
    level = len(module) - len(module.lstrip("."))
    if level == 0:
        return module
    package = package_name.split(".") if package_name else []
    if level - 1 > len(package) or (not package and level):
        return None
    base = package[: len(package) - (level - 1)]
    rest = module[level:]
    parts = [*base, *([rest] if rest else [])]
    return ".".join(p for p in parts if p) or None


def resolve(importer: ModuleFile, module: str) -> ModuleFile | None:
    """The project file ``module`` (as written in ``importer``) names, or None (once per
    folder, package and name in a run: the files of a folder import the same modules)."""
    return resolve_from(os.path.dirname(importer.path), importer.package, importer.path, module)


def resolve_from(folder: str, package: str, path: str, module: str) -> ModuleFile | None:
    """``resolve`` for the importer at ``path`` in ``folder`` and ``package``: a caller that
    resolves every import of a file works these out once, not once per name."""
    for found in _candidates(folder, package, module):
        if module.startswith(".") or found.path != path:
            return found
    return None


@lru_cache(maxsize=65536)
def _candidates(folder: str, package: str, module: str) -> tuple[ModuleFile, ...]:
    """The files ``module`` may name from a file of ``folder`` in ``package``, in the order
    Python looks (an absolute name found as the importer itself is looked up further)."""
    level = len(module) - len(module.lstrip("."))
    if level:
        for _ in range(level - 1):
            folder = os.path.dirname(folder)
        rest = module[level:]
        found = _find_in(folder, rest) if rest else _init_of(folder)
        if found is None:
            return ()
        name = _relative_name(package, module) or ""
        return (ModuleFile(found, name),)
    if not module:
        return ()
    candidates: list[ModuleFile] = []
    for root in (*roots_for(folder), *_namespace_roots(folder, module.partition(".")[0])):
        found = _find_in(root, module)
        if found is not None:
            candidates.append(ModuleFile(os.path.abspath(found), module))
            if len(candidates) == 2:  # the importer itself can be one of them, not both
                break
    return tuple(candidates)


@lru_cache(maxsize=4096)
def _namespace_roots(folder: str, top: str) -> tuple[str, ...]:
    """The folder above an ancestor of ``folder`` named ``top``: ``from yolov6.utils.ema
    import ModelEMA`` in ``yolov6/core/engine.py`` when ``yolov6`` has no ``__init__.py``
    (a namespace package, importable from the folder above it, where the code is run)."""
    current = folder
    for _ in range(MAX_PARENTS):
        parent = os.path.dirname(current)
        if parent == current:
            return ()
        if os.path.basename(current) == top:
            return (parent,)
        current = parent
    return ()


def _init_of(folder: str) -> str | None:
    candidate = os.path.join(folder, "__init__.py")
    return candidate if _isfile(candidate) else None


def clear() -> None:
    """Forget every lookup (the file system changed: tests, a long-lived process)."""
    _PROJECT_FILES.clear()
    _LISTED_AT.clear()
    clear_lookups()


def clear_lookups() -> None:
    """Forget how names resolve (a module was created or removed), not the listings."""
    for function in (
        _candidates,
        _is_package,
        project_root,
        _configured_src,
        roots_for,
        _find_in,
        _entries,
        _namespace_roots,
    ):
        function.cache_clear()


_PROJECT_FILES: dict[str, list[str]] = {}
_LISTED_AT: dict[str, float] = {}


def project_files(base: str) -> list[str]:
    """The Python files under a project root (bounded; build and environment folders left out)."""
    found = _PROJECT_FILES.get(base)
    if found is not None:
        return found
    _LISTED_AT[base] = time.time()
    found = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                found.append(os.path.join(folder, name))
        if len(found) >= MAX_PROJECT_FILES:
            break
    _PROJECT_FILES[base] = found
    return found


def listed_at(base: str) -> float:
    """When ``project_files(base)`` walked the folder (now, if it has not yet)."""
    return _LISTED_AT.get(base, time.time())


def lists(base: str, path: str) -> bool:
    """Would ``project_files(base)`` list ``path`` (were it a Python file there)?"""
    prefix = base.rstrip(os.sep) + os.sep
    if not path.startswith(prefix) or not path.endswith(".py"):
        return False
    folders = path[len(prefix) :].split(os.sep)[:-1]
    return not any(d in _SKIP_DIRS or d.startswith(".") for d in folders)


def listings_holding(path: str) -> list[list[str]]:
    """The listings made so far that list ``path`` when it exists."""
    return [found for base, found in _PROJECT_FILES.items() if lists(base, path)]


def module_stem(path: str) -> str:
    """The name a module is imported by in its package (a package's for ``__init__.py``)."""
    stem = os.path.basename(path).rsplit(".", 1)[0]
    if stem == "__init__":
        stem = os.path.basename(os.path.dirname(path))
    return stem
