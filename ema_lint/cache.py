"""A cache of lint results, so that a second run re-checks only what changed.

An entry holds the findings of one file's content under one effective configuration. It is
found by the content's hash (one file per content, ``<dir>/<build>/<hh>/<hash>``), then by a
key of everything else that decides the findings: the enabled rules, their options, noqa,
unsafe fixes, per-file ignores, whether text edits were rendered, and the path the rules
saw. ``<build>`` names the ema-lint version, a fingerprint of its installed sources (so an
edited checkout never reads stale results), the libcst version and the Python version.

Only files that pass the pre-filter are stored: for the others the pre-filter is as cheap
as hashing would be. Fixes are stored as what the reporters show (applicability, title,
text edits), not as the node edits that apply them: a run that would apply a fix re-runs
the engine on that file.

Robustness: writes go to a temporary file renamed into place, so concurrent writers (the
process pool, two runs at once) never leave a torn entry, and an unreadable, truncated or
foreign entry is a miss. Growth is bounded: a content file keeps the last few keys, entries
unused for ``MAX_AGE_DAYS`` are pruned (at most once a day), and the folders of other
builds are removed once unused for a while.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import dependencies
from ._version import __version__
from .diagnostics import Applicability, Diagnostic, Fix, Position, Related, TextEdit

DIR_NAME = ".ema_lint_cache"
ENV_VAR = "EMA_LINT_CACHE_DIR"
FORMAT = 1
KEYS_PER_CONTENT = 8  # configurations remembered per content (alternating runs, hooks)
MAX_AGE_DAYS = 30  # an entry not read or written for this long is pruned
OTHER_BUILD_DAYS = 7  # another build's folder is removed after this long unused
PRUNE_EVERY = 24 * 3600.0
_STAMP = "last-used"


_USES = "uses:"  # entry key prefix: the project files a result depends on


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _source_fingerprint() -> str:
    """Names, sizes and modification times of ema-lint's files (modules and any data files
    they read): cheap, stats only, and it changes whenever an edited checkout does."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for directory, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                path = os.path.join(directory, name)
                with contextlib.suppress(OSError):
                    st = os.stat(path)
                    rel = os.path.relpath(path, root)
                    h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:12]


_VERSION_LINE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?["']([^"']+)["']""", re.M)


def _libcst_version() -> str:
    # Read from libcst's version module without importing libcst (a warm run never needs
    # it), nor importlib.metadata (which scans every installed distribution).
    try:
        spec = importlib.util.find_spec("libcst")
        locations = list(spec.submodule_search_locations or []) if spec else []
        for location in locations:
            text = Path(location, "_version.py").read_text(encoding="utf-8")
            found = _VERSION_LINE.search(text)
            if found:
                return found.group(1)
    except (OSError, ImportError, ValueError):  # pragma: no cover - an unusual install
        pass
    from importlib.metadata import version as distribution_version  # pragma: no cover

    return distribution_version("libcst")  # pragma: no cover


def build_id() -> str:
    """What the findings of a given text and configuration depend on, besides them."""
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return f"{__version__}-{_source_fingerprint()}-libcst{_libcst_version()}-{python}"


def settings_key(settings: Any, path: str, text_edits: bool) -> str:
    """A key of an effective configuration (``engine.FileSettings``) and the path linted."""
    options = {
        name: {k: _plain(v) for k, v in sorted(values.items())}
        for name, values in sorted(settings.options.items())
    }
    described = {
        "rules": list(settings.codes),
        "options": options,
        "noqa": settings.noqa,
        "unsafe": settings.unsafe_fixes,
        "prefilter": settings.prefilter,
        "ignored": sorted(settings.ignored),
        "text_edits": text_edits,
        "path": path,
    }
    text = json.dumps(described, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)  # 0.1 and 0.1000000001 must not collide
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    return repr(value)


def default_dir(project_root: Path) -> Path:
    """``$EMA_LINT_CACHE_DIR``, else ``.ema_lint_cache`` in the project root."""
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else project_root / DIR_NAME


# Serialising findings ------------------------------------------------------------------------
# Every field of Diagnostic is stored by name, so a field added later is kept too (the build
# id changes with the sources, so old entries are never read with a new layout). A value of
# a kind not known here makes the result uncacheable rather than wrong.
class Uncacheable(ValueError):
    pass


_FIELDS = tuple(f.name for f in dataclasses.fields(Diagnostic))


def _encode_value(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float)):
        return value
    if isinstance(value, Position):
        return ["P", value.line, value.column]
    if isinstance(value, Fix):
        return ["F", value.applicability.value, value.title]
    if isinstance(value, tuple) and value and all(isinstance(e, Related) for e in value):
        return ["R", [[e.path, e.line, e.message] for e in value]]
    if isinstance(value, tuple) and all(isinstance(e, TextEdit) for e in value):
        return [
            "T",
            [[e.start.line, e.start.column, e.end.line, e.end.column, e.content] for e in value],
        ]
    raise Uncacheable(f"cannot store {type(value).__name__}")


def _decode_value(value: Any) -> Any:
    if not isinstance(value, list):
        return value
    tag = value[0]
    if tag == "P":
        return Position(int(value[1]), int(value[2]))
    if tag == "F":
        return Fix(Applicability(value[1]), (), str(value[2]))
    if tag == "R":
        return tuple(Related(str(p), int(n), str(m)) for p, n, m in value[1])
    if tag == "T":
        return tuple(
            TextEdit(Position(int(a), int(b)), Position(int(c), int(d)), str(t))
            for a, b, c, d, t in value[1]
        )
    raise ValueError(f"unknown tag {tag!r}")


def _encode(d: Diagnostic) -> dict[str, Any]:
    out = {}
    for name in _FIELDS:
        if name == "path":
            continue  # the entry's key holds it; the reader supplies it
        value = getattr(d, name)
        if value is not None and not (name == "related" and not value):
            out[name] = _encode_value(value)
    return out


def _decode(item: dict[str, Any], path: str) -> Diagnostic:
    fields = {name: _decode_value(value) for name, value in item.items()}
    fields["path"] = path
    return Diagnostic(**fields)


def portable(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """The findings as the cache and the process pool carry them: fixes without node edits."""
    return [
        dataclasses.replace(d, fix=Fix(d.fix.applicability, (), d.fix.title))
        if d.fix is not None and d.fix.edits
        else d
        for d in diagnostics
    ]


# The store -----------------------------------------------------------------------------------
class Cache:
    """Lint results under ``directory``; every failure to read or write is a miss."""

    def __init__(self, directory: Path, build: str | None = None) -> None:
        self.directory = Path(directory)
        self.build = build or build_id()
        self.root = self.directory / self.build
        self.hits = 0
        self.misses = 0
        self._ready = False
        self._writable = True

    # Reading ----------------------------------------------------------------------------------
    def _entry_path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest[2:]

    def _load(self, digest: str) -> dict[str, Any]:
        try:
            with open(self._entry_path(digest), "rb") as handle:
                document = json.loads(handle.read())
        except (OSError, ValueError):
            return {}
        if (
            not isinstance(document, dict)
            or document.get("format") != FORMAT
            or document.get("content") != digest
            or not isinstance(document.get("entries"), dict)
        ):
            return {}
        return document["entries"]

    def get(self, digest: str, key: str, path: str) -> list[Diagnostic] | None:
        """The findings stored for this content and key (None: not cached or unusable, or a
        module of the project it read has changed since)."""
        entries = self._load(digest)
        item = entries.get(key)
        if not isinstance(item, list):
            self.misses += 1
            return None
        used = entries.get(_USES + key)
        if isinstance(used, dict) and not dependencies.unchanged(used):
            self.misses += 1
            return None
        try:
            found = [_decode(entry, path) for entry in item]
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            self.misses += 1
            return None
        self.hits += 1
        self._touch(digest)
        return found

    def _touch(self, digest: str) -> None:
        # Refresh the entry's age for pruning, at most once an hour per entry.
        path = self._entry_path(digest)
        with contextlib.suppress(OSError):
            if time.time() - path.stat().st_mtime > 3600:
                os.utime(path)

    # Writing ----------------------------------------------------------------------------------
    def _prepare(self) -> bool:
        if self._ready:
            return self._writable
        self._ready = True
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            ignore = self.directory / ".gitignore"
            if not ignore.exists():
                _write_atomic(ignore, b"# Created by ema-lint: nothing here belongs in git.\n*\n")
            tag = self.directory / "CACHEDIR.TAG"
            if not tag.exists():
                _write_atomic(
                    tag,
                    b"Signature: 8a477f597d28d172789f06886806bc55\n"
                    b"# This file is a cache directory tag created by ema-lint.\n",
                )
        except OSError:
            self._writable = False
        return self._writable

    def put(
        self,
        digest: str,
        key: str,
        diagnostics: Sequence[Diagnostic],
        used: Mapping[str, str] | None = None,
    ) -> None:
        """Store the findings of a content under a key (with the other files the lint read
        and their hashes); a failure only loses the entry."""
        if not self._prepare():
            return
        entries = self._load(digest)
        entries.pop(key, None)
        entries.pop(_USES + key, None)
        try:
            entries[key] = [_encode(d) for d in diagnostics]
        except Uncacheable:
            return
        if used:
            entries[_USES + key] = dict(used)
        results = [k for k in entries if not k.startswith(_USES)]
        while len(results) > KEYS_PER_CONTENT:
            oldest = results.pop(0)
            del entries[oldest]
            entries.pop(_USES + oldest, None)
        document = {"format": FORMAT, "content": digest, "entries": entries}
        data = json.dumps(document, separators=(",", ":")).encode()
        path = self._entry_path(digest)
        try:
            path.parent.mkdir(exist_ok=True)
            _write_atomic(path, data)
        except OSError:
            self._writable = False

    # Pruning ----------------------------------------------------------------------------------
    def prune(self, now: float | None = None) -> None:
        """Drop old entries and old builds; runs at most once a day, errors are ignored."""
        now = time.time() if now is None else now
        if not self.root.is_dir() or not self._prepare():
            return  # nothing was ever stored by this build here
        stamp = self.root / _STAMP
        try:
            last = stamp.stat().st_mtime
        except OSError:
            last = 0.0
        if now - last < PRUNE_EVERY:
            return
        with contextlib.suppress(OSError):
            _write_atomic(stamp, b"")
            os.utime(stamp, (now, now))
        self._prune_entries(now)
        self._prune_builds(now)

    def _prune_entries(self, now: float) -> None:
        limit = now - MAX_AGE_DAYS * 86400
        for directory, _, filenames in os.walk(self.root):
            for name in filenames:
                path = os.path.join(directory, name)
                with contextlib.suppress(OSError):
                    age_limit = now - 3600 if name.endswith(".tmp") else limit
                    keep = name in (_STAMP, StatIndex.NAME)
                    if not keep and os.stat(path).st_mtime < age_limit:
                        os.unlink(path)

    def _prune_builds(self, now: float) -> None:
        limit = now - OTHER_BUILD_DAYS * 86400
        try:
            children = list(self.directory.iterdir())
        except OSError:
            return
        for child in children:
            if child == self.root or not child.is_dir():
                continue
            try:
                used = (child / _STAMP).stat().st_mtime
            except OSError:
                used = 0.0
                with contextlib.suppress(OSError):
                    used = child.stat().st_mtime
            if used < limit:
                shutil.rmtree(child, ignore_errors=True)


class StatIndex:
    """What each file held when last seen, by its stat signature: warm runs skip reading.

    A file whose size, modification and change times and inode are as recorded still
    holds the recorded content (as in ruff's and git's caches), so its verdict stands:
    ``skip:<filter>`` (the pre-filter of that fingerprint found no trigger) or
    ``sha:<hash>`` (its content hash, to look up in the cache). A file modified less than
    ``RACY_SECONDS`` before it was read is not recorded: a second write within the
    file system's timestamp granularity could otherwise leave the same signature.
    """

    RACY_SECONDS = 2.0
    MAX_ENTRIES = 200_000
    NAME = "stat-index.json"

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.path = cache.root / self.NAME
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        try:
            with open(self.path, "rb") as handle:
                document = json.loads(handle.read())
            if isinstance(document, dict) and document.get("format") == FORMAT:
                entries = document.get("entries")
                if isinstance(entries, dict):
                    self.entries = entries
        except (OSError, ValueError):
            pass

    @staticmethod
    def signature(path: str) -> list[int] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return StatIndex.signature_of(st)

    @staticmethod
    def signature_of(st: os.stat_result) -> list[int]:
        """The signature of a file from its ``os.stat`` (taken by discovery, say)."""
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]

    def get(self, path: str, signature: list[int] | None) -> str | None:
        if signature is None:
            return None
        entry = self.entries.get(path)
        if not isinstance(entry, list) or len(entry) != 2 or entry[0] != signature:
            return None
        verdict = entry[1]
        return verdict if isinstance(verdict, str) else None

    def record(self, path: str, signature: list[int] | None, verdict: str) -> None:
        if signature is None:
            return
        newest = max(signature[1], signature[2]) / 1e9
        if time.time() - newest < self.RACY_SECONDS:
            self.entries.pop(path, None)
            return
        entry = [signature, verdict]
        if self.entries.get(path) != entry:
            self.entries.pop(path, None)  # re-insert: the newest entries are kept last
            self.entries[path] = entry
            self.dirty = True

    def save(self) -> None:
        if not self.dirty or not self.cache._prepare():
            return
        while len(self.entries) > self.MAX_ENTRIES:
            del self.entries[next(iter(self.entries))]
        document = {"format": FORMAT, "entries": self.entries}
        with contextlib.suppress(OSError):
            _write_atomic(self.path, json.dumps(document, separators=(",", ":")).encode())
        self.dirty = False


def _write_atomic(path: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
