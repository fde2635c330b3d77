"""Configuration: ``[tool.ema-lint]`` in pyproject.toml, or ``ema-lint.toml`` / ``.ema-lint.toml``.

Each file is governed by the nearest configuration file above it (as in ruff), unless
``--config`` names one or ``--isolated`` ignores them all. Selection is layered: the
defaults, then the file's ``select`` / ``extend-select`` / ``ignore``, then the command
line's, where a ``select`` resets what came before it. Every key is validated: a typo or a
wrong type is an error naming the key and the file.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import registry
from .file_settings import FileSettings
from .options import OptionError, check_order, rule_options_from

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec

CONFIG_NAMES = (".ema-lint.toml", "ema-lint.toml", "pyproject.toml")

DEFAULT_EXCLUDES = (
    # version control, virtualenvs and tool caches
    ".bzr",
    ".direnv",
    ".eggs",
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".pyenv",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytype",
    ".ruff_cache",
    ".pytest_cache",
    ".ema_lint_cache",
    ".ipynb_checkpoints",
    "__pycache__",
    "__pypackages__",
    "node_modules",
    "site-packages",
    # build output
    "_build",
    "build",
    "buck-out",
    "dist",
    # training run records: Hydra's (outputs/**/.hydra, multirun/), experiment trackers'
    # copies of the code and configs (wandb/, mlruns/), Lightning's logs
    ".hydra",
    "multirun",
    "wandb",
    "mlruns",
    "lightning_logs",
)

_LIST_KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude")
_KNOWN_KEYS = (*_LIST_KEYS, "per-file-ignores", "unsafe-fixes", "respect-gitignore")


class ConfigError(Exception):
    """A configuration file or flag that cannot be used; the message names key and file."""


@dataclass
class ConfigFile:
    """What one configuration file says (absent keys are None / empty)."""

    path: Path | None = None
    root: Path = field(default_factory=Path.cwd)
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] | None = None
    extend_exclude: list[str] = field(default_factory=list)
    unsafe_fixes: bool | None = None
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    respect_gitignore: bool | None = None


@dataclass
class Overrides:
    """What the command line (or the flake8 options) says; wins over files."""

    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] | None = None
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    unsafe_fixes: bool | None = None
    rule_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    noqa: bool = True
    prefilter: bool = True
    respect_gitignore: bool | None = None  # None: as the configuration says (default on)


def _load_toml(path: Path) -> dict[str, Any]:
    # Imported when a configuration file is read (``--isolated`` and warm runs from a
    # folder without one need no TOML parser).
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on Python 3.10
        import tomli as tomllib
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block, a device never end
            raise ConfigError(f"{path}: cannot read: not a regular file")
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except UnicodeDecodeError as error:  # TOML is UTF-8; tomllib lets this one through
        raise ConfigError(
            f"{path}: invalid TOML: not UTF-8 text (byte 0x{error.object[error.start]:02x} "
            f"at offset {error.start})"
        ) from None


def _section(path: Path, data: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        if not isinstance(tool, Mapping):
            return None
        section = tool.get("ema-lint")
        if section is None:
            return None
        if not isinstance(section, Mapping):
            raise ConfigError(f"{path}: [tool.ema-lint] must be a table")
        return section
    return data


def _str_list(path: Path, key: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: '{key}' must be a list of strings, got {value!r}")
    return list(value)


def _check_selectors(where: str, key: str, selectors: Iterable[str]) -> None:
    for selector in selectors:
        try:
            registry.expand(selector)
        except registry.UnknownSelector:
            raise ConfigError(f"{where}: '{key}' has an unknown rule {selector!r}") from None


def parse_config(path: Path, data: Mapping[str, Any]) -> ConfigFile:
    """Validate one configuration table."""
    config = ConfigFile(path=path, root=path.parent.resolve())
    for key, value in data.items():
        rule = registry.info(key)
        if rule is not None:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{path}: '{key}' must be a table of options for {rule.name}")
            try:
                config.rule_options[rule.name] = rule_options_from(rule, value)
            except OptionError as error:
                raise ConfigError(f"{path}: {error}") from None
            continue
        if key not in _KNOWN_KEYS:
            raise ConfigError(f"{path}: unknown key '{key}'")
        if key in _LIST_KEYS:
            items = _str_list(path, key, value)
            if key in ("select", "extend-select", "ignore"):
                _check_selectors(str(path), key, items)
            setattr(config, key.replace("-", "_"), items)
        elif key == "per-file-ignores":
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{path}: 'per-file-ignores' must be a table of pattern = [codes]"
                )
            for pattern, codes in value.items():
                items = _str_list(path, f"per-file-ignores.{pattern}", codes)
                _check_selectors(str(path), f"per-file-ignores.{pattern}", items)
                config.per_file_ignores[pattern] = items
        elif key in ("unsafe-fixes", "respect-gitignore"):
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: '{key}' must be true or false, got {value!r}")
            setattr(config, key.replace("-", "_"), value)
    return config


def load_config(path: Path, data: Mapping[str, Any] | None = None) -> ConfigFile:
    """A configuration file named explicitly (``--config``), or found (``data``: its table)."""
    if data is None:
        data = _load_toml(path)
    section = _section(path, data)
    if section is None:
        if path.name == "pyproject.toml":
            return ConfigFile(path=path, root=path.parent.resolve())
        section = data
    return parse_config(path, section)


def find_config_file(directory: Path) -> Path | None:
    """The configuration file that governs ``directory``: the nearest one above it."""
    return ConfigFinder().find(directory)


class ConfigFinder:
    """``find_config_file`` with memory: each folder is looked at, and each pyproject.toml
    read, once per run however many files and folders below it are asked about."""

    def __init__(self) -> None:
        self._by_dir: dict[Path, Path | None] = {}
        self.tables: dict[Path, Mapping[str, Any]] = {}  # pyproject.toml files read

    def find(self, directory: Path) -> Path | None:
        """The nearest configuration file at or above ``directory`` (an absolute path)."""
        pending: list[Path] = []
        found: Path | None = None
        folder = directory
        while True:
            if folder in self._by_dir:
                found = self._by_dir[folder]
                break
            pending.append(folder)
            found = self._here(folder)
            if found is not None:
                break
            parent = folder.parent
            if parent == folder:
                break
            folder = parent
        for seen in pending:  # every folder walked through is governed by what was found
            self._by_dir[seen] = found
        return found

    def _here(self, folder: Path) -> Path | None:
        for name in CONFIG_NAMES:
            candidate = folder / name
            if not os.path.isfile(candidate):  # False, not an error, in an unreadable folder
                continue
            if name == "pyproject.toml":
                try:
                    data = self.tables[candidate] = _load_toml(candidate)
                    if _section(candidate, data) is None:
                        continue
                except ConfigError:
                    return candidate  # broken: let the loader report it
            return candidate
        return None


def _matches(pattern: str, relative: str, name: str) -> bool:
    if "/" not in pattern.rstrip("/"):
        return fnmatch.fnmatchcase(name, pattern.rstrip("/"))
    pattern = pattern.strip("/")
    return fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(relative, pattern + "/*")


def _gitignore_pattern(pattern: str) -> str:
    """An exclude pattern in gitignore syntax: ``./outputs`` means ``/outputs`` (this
    folder's), as users write it."""
    while pattern.startswith("./"):
        pattern = "/" + pattern[2:].lstrip("/")
    return pattern


# An exclude pattern that names one file or folder, with no wildcard, escape or comment.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+/?")


class _Excludes:
    """A list of exclude patterns, read with gitignore semantics (``pathspec``).

    ``outputs`` or ``build/`` match that name at any depth, ``docs/evidence`` and
    ``/outputs`` are relative to the configuration's folder, ``**/outputs/**`` matches a
    top-level ``outputs/`` too, ``!pattern`` keeps what an earlier pattern excluded. When
    every pattern is a bare name (the defaults), the name alone decides: no path to resolve.
    """

    def __init__(self, patterns: Sequence[str]) -> None:
        lines = [_gitignore_pattern(p) for p in patterns if p.strip()]
        self.lines = lines
        self.by_name_only = all(
            "/" not in line.rstrip("/") and not line.startswith("!") for line in lines
        )
        # Plain names (the defaults): a set says what the patterns would, without trying
        # each pattern on each file (a third of a warm run's time on a large tree), and
        # without compiling them (or importing pathspec) at all.
        self.names: frozenset[str] | None = None
        self.folder_names: frozenset[str] = frozenset()
        self._spec: GitIgnoreSpec | None = None
        if self.by_name_only and all(_PLAIN_NAME.fullmatch(line) for line in lines):
            self.names = frozenset(line for line in lines if not line.endswith("/"))
            self.folder_names = frozenset(line[:-1] for line in lines if line.endswith("/"))

    @property
    def spec(self) -> GitIgnoreSpec | None:
        """The patterns compiled (None when there are none)."""
        if self._spec is None and self.lines:
            from pathspec import GitIgnoreSpec

            self._spec = GitIgnoreSpec.from_lines(self.lines)
        return self._spec

    def matches(self, name: str, relative: str | None, is_dir: bool) -> bool:
        """``relative`` (to the configuration's folder) is needed unless ``by_name_only``."""
        if self.names is not None:
            return name in self.names or (is_dir and name in self.folder_names)
        if self.spec is None:
            return False
        target = name if self.by_name_only or relative is None else relative
        return self.spec.match_file(target + "/" if is_dir else target)


def _relative(path: Path, root: Path) -> str:
    try:
        # The folder is resolved, not the file itself: a symbolic link is judged by its own
        # name, and a link loop (on which resolve() raises) cannot stop the run.
        return (path.parent.resolve() / path.name).relative_to(root).as_posix()
    except (ValueError, OSError, RuntimeError):
        return path.as_posix()


_OUTSIDE = "\0outside"  # a folder not below the configuration's root, or unresolvable


class Settings:
    """Resolves, per file, which rules run with which options, and what is excluded."""

    def __init__(
        self,
        overrides: Overrides | None = None,
        *,
        config_path: Path | None = None,
        isolated: bool = False,
    ) -> None:
        self.overrides = overrides or Overrides()
        self.isolated = isolated
        self.errors: list[str] = []
        self._fixed: ConfigFile | None = None
        self._by_dir: dict[Path, ConfigFile] = {}
        self._by_spelling: dict[str, ConfigFile] = {}
        self._by_file: dict[Path, ConfigFile] = {}
        self._file_settings: dict[tuple[Path | None, tuple[str, ...]], FileSettings] = {}
        self._finder = ConfigFinder()
        self._resolved: dict[tuple[str, Path], str] = {}
        self._real: dict[str, Path] = {}  # each folder as spelled, resolved (once)
        self._excludes: dict[int, tuple[ConfigFile, _Excludes]] = {}
        self._compiled: dict[tuple[str, ...], _Excludes] = {}
        self._validate_overrides()
        if config_path is not None:
            self._fixed = load_config(config_path)
        elif isolated:
            self._fixed = ConfigFile()
        if self._fixed is not None:
            problem = self._order_problem(self._fixed)
            if problem is not None:
                raise ConfigError(problem)

    def _validate_overrides(self) -> None:
        o = self.overrides
        for key, values in (
            ("--select", o.select or []),
            ("--extend-select", o.extend_select),
            ("--ignore", o.ignore),
        ):
            _check_selectors("command line", key, values)

    # Which configuration governs a path -----------------------------------------------------
    def config_for(self, path: Path, *, is_dir: bool | None = None) -> ConfigFile:
        """The configuration governing ``path``; ``is_dir`` spares a stat when it is known."""
        if self._fixed is not None:
            return self._fixed
        if is_dir is None:
            is_dir = os.path.isdir(path)  # False, not an error, in an unreadable folder
        directory = path if is_dir else path.parent
        # Resolving costs a system call per folder: once per folder as spelled is enough.
        spelled = str(directory)
        found = self._by_spelling.get(spelled)
        if found is not None:
            return found
        directory = self._real_folder(directory, spelled) if spelled else Path.cwd()
        found = self._by_dir.get(directory)
        if found is not None:
            self._by_spelling[spelled] = found
            return found
        config_file = self._finder.find(directory)
        if config_file is None:
            config = ConfigFile(root=Path.cwd())
        elif config_file in self._by_file:
            config = self._by_file[config_file]
        else:
            try:
                config = load_config(config_file, self._finder.tables.get(config_file))
            except ConfigError as error:
                self.errors.append(str(error))
                config = ConfigFile(path=config_file, root=config_file.parent.resolve())
            self._by_file[config_file] = config
        problem = self._order_problem(config)
        if problem is not None and problem not in self.errors:
            self.errors.append(problem)
        self._by_dir[directory] = config
        self._by_spelling[spelled] = config
        return config

    def _order_problem(self, config: ConfigFile) -> str | None:
        """An option range that accepts nothing once the file's options and the command
        line's are combined (``min`` not below ``max``), as a message; else None."""
        o = self.overrides
        for name in {*config.rule_options, *o.rule_options}:
            rule = registry.info(name)
            if rule is None:
                continue
            values = {**config.rule_options.get(name, {}), **o.rule_options.get(name, {})}
            try:
                check_order(rule, values)
            except OptionError as error:
                where = config.path if name in config.rule_options else "command line"
                return f"{where}: {error}"
        return None

    def check_config(self, paths: Sequence[Path]) -> None:
        """Load the configuration of each target now, so its errors come first."""
        for path in paths:
            self.config_for(path)

    # Exclusion ------------------------------------------------------------------------------
    def _excludes_of(self, config: ConfigFile) -> _Excludes:
        matcher = self._excludes.get(id(config))
        if matcher is None:
            o = self.overrides
            if o.exclude is not None:
                patterns = list(o.exclude)
            elif config.exclude is not None:
                patterns = list(config.exclude)
            else:
                patterns = list(DEFAULT_EXCLUDES)
            patterns += config.extend_exclude + o.extend_exclude
            # The spec depends on the patterns alone (paths are made relative to the
            # configuration's folder by the caller): a run with a configuration per folder
            # and the same patterns compiles them once.
            key = tuple(patterns)
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compiled[key] = _Excludes(patterns)
            matcher = self._excludes[id(config)] = (config, compiled)
        return matcher[1]

    def excluded(self, path: Path, *, is_dir: bool | None = None) -> bool:
        config = self.config_for(path, is_dir=is_dir)
        excludes = self._excludes_of(config)
        if not excludes.lines:
            return False
        if is_dir is None:
            is_dir = path.is_dir()
        # Resolving the path costs a system call per folder: only patterns with a "/" need it.
        relative = None if excludes.by_name_only else self._relative(path, config.root)
        return excludes.matches(path.name, relative, is_dir)

    def respects_gitignore(self, path: Path) -> bool:
        """Does a walk from ``path`` skip what git ignores? (the command line, else the
        configuration governing ``path``, else yes, as ruff does)."""
        if self.overrides.respect_gitignore is not None:
            return self.overrides.respect_gitignore
        configured = self.config_for(path).respect_gitignore
        return True if configured is None else configured

    def kept_files(self, folder: Path, names: Iterable[str]) -> list[str]:
        """The names of the files in ``folder`` that ``excluded`` keeps, in order: the same
        verdicts, with one configuration lookup for the folder instead of one per file."""
        config = self.config_for(folder, is_dir=True)  # a file's config is its folder's
        excludes = self._excludes_of(config)
        if not excludes.lines:
            return list(names)
        kept = []
        for name in names:
            relative = None if excludes.by_name_only else self._relative(folder / name, config.root)
            if not excludes.matches(name, relative, False):
                kept.append(name)
        return kept

    def _real_folder(self, folder: Path, spelled: str) -> Path:
        """``folder.resolve()``, once per folder as spelled; from its parent's when that is
        known and the folder is no symbolic link (one lstat instead of one per component)."""
        real = self._real.get(spelled)
        if real is not None:
            return real
        parent = self._real.get(str(folder.parent))
        name = folder.name
        if parent is not None and name not in ("", ".", "..") and not os.path.islink(folder):
            real = parent / name
        else:
            real = folder.resolve()
        self._real[spelled] = real
        return real

    def _relative(self, path: Path, root: Path) -> str:
        """``_relative``, resolving each folder once (not once per file in it)."""
        spelled = str(path.parent)
        key = (spelled, root)
        folder = self._resolved.get(key)
        if folder is None:
            try:
                relative = self._real_folder(path.parent, spelled).relative_to(root).as_posix()
                folder = "" if relative == "." else relative + "/"
            except (ValueError, OSError, RuntimeError):
                folder = _OUTSIDE
            self._resolved[key] = folder
        if folder is _OUTSIDE:
            return _relative(path, root)  # as it was: the rare case, not worth a shortcut
        return folder + path.name

    # Rules ----------------------------------------------------------------------------------
    def for_file(self, path: Path | None, *, is_dir: bool | None = None) -> FileSettings:
        if path is None:
            config = self._fixed or ConfigFile()
        else:
            config = self.config_for(path, is_dir=is_dir)
        ignored_here: list[str] = []
        if path is not None and (config.per_file_ignores or self.overrides.per_file_ignores):
            relative = self._relative(path, config.root)
            for source in (config.per_file_ignores, self.overrides.per_file_ignores):
                for pattern, codes in source.items():
                    if _matches(pattern, relative, path.name):
                        ignored_here.extend(codes)
        key = (config.path, tuple(sorted(ignored_here)))
        cached = self._file_settings.get(key)
        if cached is None:
            cached = self._resolve(config, ignored_here)
            self._file_settings[key] = cached
        return cached

    def _resolve(self, config: ConfigFile, extra_ignores: Sequence[str]) -> FileSettings:
        o = self.overrides
        codes = registry.default_codes()
        for select, extend, ignore in (
            (config.select, config.extend_select, config.ignore),
            (o.select, o.extend_select, o.ignore),
        ):
            if select is not None:
                codes = registry.expand_all(select)
            codes |= registry.expand_all(extend)
            codes -= registry.expand_all(ignore)
        ignored = set(registry.expand_all(config.ignore)) | set(registry.expand_all(o.ignore))
        extra = registry.expand_all(extra_ignores)
        codes -= extra
        ignored |= extra
        # ema-lint's own errors (EMA9xx) ignore ``select``: they are dropped only if ignored.
        ignored_final = frozenset(ignored)
        # By code: the rule classes are imported only if a file reaches the engine.
        enabled = tuple(c for c in sorted(codes) if not registry.is_internal(c))
        options: dict[str, dict[str, Any]] = {}
        for name, values in config.rule_options.items():
            options.setdefault(name, {}).update(values)
        for name, values in o.rule_options.items():
            options.setdefault(name, {}).update(values)
        unsafe = o.unsafe_fixes if o.unsafe_fixes is not None else bool(config.unsafe_fixes)
        return FileSettings(
            codes=enabled,
            options=options,
            noqa=o.noqa,
            unsafe_fixes=unsafe,
            prefilter=o.prefilter,
            ignored=ignored_final,
        )


def parse_rule_option(text: str) -> tuple[str, str, str]:
    """``RULE.OPTION=VALUE`` from the command line -> (rule name, option, raw value)."""
    head, sep, value = text.partition("=")
    rule_text, dot, option = head.rpartition(".")
    if not sep or not dot:
        raise ConfigError(f"--option expects RULE.OPTION=VALUE, got {text!r}")
    rule = registry.info(rule_text)
    if rule is None:
        raise ConfigError(f"--option: unknown rule {rule_text!r}")
    return rule.name, option, value


def env_flag(name: str) -> bool:
    return bool(os.environ.get(name))
