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

Ownership: the folder named by ``--cache-dir`` or ``$EMA_LINT_CACHE_DIR`` may be shared
(``.``, ``~/.cache``). The cache keeps its files in a folder it can prove it made: one
holding the ``CACHEDIR.TAG`` this module writes (``_TAG``), the named folder when ema-lint
creates it or it holds nothing but an older ema-lint cache, else a ``.ema_lint_cache``
folder inside it. Pruning removes only what matches the cache's own layout (build folders,
two-hex-digit shards, 62-hex-digit entries, its stamps and temporary files) below that tag,
never follows a symbolic link and never removes a folder that still holds anything else.
Digests read back (from the stat index) must be 64 hex digits: an index cannot point
outside the folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import re
import secrets
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
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
TAG_NAME = "CACHEDIR.TAG"
# The tag that marks a folder as this cache's own (https://bford.info/cachedir/). Earlier
# versions wrote _LEGACY_TAG into whatever folder they were given: it proves nothing alone.
_TAG = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# This file is a cache directory tag created by ema-lint.\n"
    b"# ema-lint cache, layout 2: ema-lint removes only its own build folders here.\n"
)
_LEGACY_TAG = (
    b"Signature: 8a477f597d28d172789f06886806bc55\n"
    b"# This file is a cache directory tag created by ema-lint.\n"
)
_IGNORE = b"# Created by ema-lint: nothing here belongs in git.\n*\n"
# The layout: <home>/<build>/<shard>/<entry>, with stamps and temporary files.
_BUILD = re.compile(r"[0-9A-Za-z.+!_-]+-[0-9a-f]{12}-libcst[0-9A-Za-z.+!_-]+-py[0-9]+\Z")
_SHARD = re.compile(r"[0-9a-f]{2}\Z")
_ENTRY = re.compile(r"[0-9a-f]{62}\Z")
SUMMARIES = "summaries"  # module summaries of the project model, in a build folder
_SUMMARY = re.compile(r"[0-9a-f]{62}\.json\Z")
_DIGEST = re.compile(r"[0-9a-f]{64}\Z")
_TEMP = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.tmp\Z")  # what _write_atomic leaves when killed
TEMP_AGE = 3600.0  # a temporary file older than this belongs to no running writer


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


def _read_regular(path: Path | str, limit: int = -1) -> bytes | None:
    """The bytes of a regular file, or None: a symbolic link, a FIFO or a device is never
    opened for reading (a FIFO would block, a device would never end)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_own(folder: Path) -> bool:
    """Does ``folder`` hold the tag this module writes (so ema-lint made it)?"""
    return _read_regular(folder / TAG_NAME, 4096) == _TAG


def _is_legacy(folder: Path) -> bool:
    """Does ``folder`` hold an earlier ema-lint's cache and nothing else? (Its tag, its
    ``.gitignore``, build folders and their temporary files: then it is safe to adopt; so
    is an empty folder of the cache's own name.)"""
    tagged = False
    empty = True
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                empty = False
                name = entry.name
                if name == TAG_NAME:
                    tagged = _read_regular(entry.path, 4096) in (_TAG, _LEGACY_TAG)
                    if not tagged:
                        return False
                elif name == ".gitignore":
                    if _read_regular(entry.path, 4096) != _IGNORE:
                        return False
                elif _BUILD.match(name):
                    if not entry.is_dir(follow_symlinks=False):
                        return False
                elif not (_TEMP.match(name) and entry.is_file(follow_symlinks=False)):
                    return False
    except OSError:
        return False
    return tagged or (empty and folder.name == DIR_NAME)


def find_home(directory: Path) -> Path | None:
    """The folder the cache may own for ``directory`` (see the module's docstring); None
    when there is none (a file is in the way)."""
    nested = directory / DIR_NAME
    if _is_own(directory):
        return directory
    if _is_own(nested):
        return nested
    if not os.path.exists(directory):
        return directory  # created by the cache on its first write
    if not os.path.isdir(directory):
        return None
    if _is_legacy(directory):
        return directory
    if not os.path.lexists(nested) or (not os.path.islink(nested) and _is_legacy(nested)):
        return nested
    return None


def _claim(home: Path) -> bool:
    """Make ``home`` the cache's own: created with its tag in one rename (so no other run
    ever sees it untagged and nests a cache inside), or an earlier ema-lint's cache tagged."""
    if _is_own(home):
        return True
    if os.path.lexists(home):
        if not _is_legacy(home):
            return False
        _write_atomic(home / TAG_NAME, _TAG)
        return True
    home.parent.mkdir(parents=True, exist_ok=True)
    temp = os.path.join(home.parent, f".{home.name}.{secrets.token_hex(4)}.tmp")
    os.mkdir(temp)  # the mode a plain mkdir gives (mkdtemp's would be private)
    made = [os.path.join(temp, TAG_NAME), os.path.join(temp, ".gitignore")]
    try:
        for path, data in zip(made, (_TAG, _IGNORE), strict=True):
            with open(path, "xb") as handle:
                handle.write(data)
        os.rename(temp, home)
    except OSError:  # another run made it first (or it cannot be made)
        for path in made:
            with contextlib.suppress(OSError):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.rmdir(temp)
    return _is_own(home)


def _real_dir(path: Path | str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


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
        self.hits = 0
        self.misses = 0
        self._ready = False
        self._writable = True
        self._home: Path | None = None
        self._found = False

    @property
    def home(self) -> Path | None:
        """The folder the cache owns (found once: see ``find_home``)."""
        if not self._found:
            self._home = find_home(self.directory)
            self._found = True
        return self._home

    @property
    def root(self) -> Path | None:
        """This build's folder in ``home``."""
        home = self.home
        return None if home is None else home / self.build

    # Reading ----------------------------------------------------------------------------------
    def _entry_path(self, digest: str) -> Path | None:
        root = self.root
        if root is None or not _DIGEST.match(digest):
            return None  # not a digest: never a path outside the cache
        return root / digest[:2] / digest[2:]

    def _load(self, digest: str) -> dict[str, Any]:
        path = self._entry_path(digest)
        data = _read_regular(path) if path is not None else None
        if data is None:
            return {}
        try:
            document = json.loads(data)
        except ValueError:
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
        if isinstance(used, dict):
            if not dependencies.unchanged(used):
                self.misses += 1
                return None
            fresh = dependencies.refreshed(used)
            if fresh is not None:  # files were read to tell: the next run need not
                entries[_USES + key] = fresh
                self._write(digest, entries)
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
        if path is None:
            return
        with contextlib.suppress(OSError, NotImplementedError):
            if time.time() - os.lstat(path).st_mtime > 3600:
                os.utime(path, follow_symlinks=os.utime not in os.supports_follow_symlinks)

    # Writing ----------------------------------------------------------------------------------
    def summaries_folder(self) -> Path | None:
        """Where the project's module summaries of this build are kept: ``summaries/`` in
        this build's folder, pruned with it (None when the cache cannot be written)."""
        if not self._prepare():
            return None
        assert self.root is not None
        return self.root / SUMMARIES

    def _prepare(self) -> bool:
        if self._ready:
            return self._writable
        self._ready = True
        home, root = self.home, self.root
        if home is None or root is None:
            self._writable = False
            return False
        try:
            if not _claim(home):
                self._writable = False
                return False
            root.mkdir(exist_ok=True)
            self._writable = _real_dir(root)  # never write through a link planted here
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
        self._write(digest, entries)

    def _write(self, digest: str, entries: dict[str, Any]) -> None:
        if not self._prepare():
            return
        document = {"format": FORMAT, "content": digest, "entries": entries}
        data = json.dumps(document, separators=(",", ":")).encode()
        path = self._entry_path(digest)
        if path is None:
            return
        try:
            path.parent.mkdir(exist_ok=True)
            if _real_dir(path.parent):
                _write_atomic(path, data)
        except OSError:
            self._writable = False

    # Pruning ----------------------------------------------------------------------------------
    def prune(self, now: float | None = None) -> None:
        """Drop old entries and old builds; runs at most once a day, errors are ignored."""
        now = time.time() if now is None else now
        root, home = self.root, self.home
        if root is None or home is None or not _real_dir(root) or not self._prepare():
            return  # nothing was ever stored by this build here
        stamp = root / _STAMP
        try:
            last = os.lstat(stamp).st_mtime
        except OSError:
            last = 0.0
        if now - last < PRUNE_EVERY:
            return
        with contextlib.suppress(OSError):
            _write_atomic(stamp, b"")
            os.utime(stamp, (now, now))
        _sweep(root, now, now - MAX_AGE_DAYS * 86400)
        self._prune_builds(home, now)

    def _prune_builds(self, home: Path, now: float) -> None:
        if not _is_own(home):
            return  # only below the tag this module wrote
        limit = now - OTHER_BUILD_DAYS * 86400
        try:
            with os.scandir(home) as entries:
                children = [
                    e.path
                    for e in entries
                    if e.name != self.build
                    and _BUILD.match(e.name)
                    and e.is_dir(follow_symlinks=False)
                ]
        except OSError:
            return
        for child in children:
            try:
                used = os.lstat(os.path.join(child, _STAMP)).st_mtime
            except OSError:
                used = 0.0
                with contextlib.suppress(OSError):
                    used = os.lstat(child).st_mtime
            if used < limit:
                _sweep(child, now, None)


def _sweep(build: str | Path, now: float, limit: float | None) -> None:
    """Remove the cache's own files in a build folder: entries last used before ``limit``
    and stale temporary files, or (``limit`` None) all of them and then the emptied folders.
    Anything else, a symbolic link or a special file, is left where it is."""
    everything = limit is None

    def remove_files(entries: Iterable[os.DirEntry], names: re.Pattern) -> None:
        for entry in entries:
            temp = _TEMP.match(entry.name)
            if not (temp or names.match(entry.name)):
                continue
            with contextlib.suppress(OSError):
                if not entry.is_file(follow_symlinks=False):
                    continue
                mtime = entry.stat(follow_symlinks=False).st_mtime
                if everything or mtime < (now - TEMP_AGE if temp else limit):
                    os.unlink(entry.path)

    own_files = re.compile(rf"(?:{re.escape(_STAMP)}|{re.escape(StatIndex.NAME)})\Z")
    try:
        with os.scandir(build) as listing:
            entries = list(listing)
    except OSError:
        return
    shards = [e for e in entries if _SHARD.match(e.name) and e.is_dir(follow_symlinks=False)]
    if everything:
        remove_files(entries, own_files)
    else:
        remove_files([e for e in entries if _TEMP.match(e.name)], own_files)
    _sweep_shards(shards, remove_files, _ENTRY, everything)
    summaries = next(
        (e for e in entries if e.name == SUMMARIES and e.is_dir(follow_symlinks=False)), None
    )
    if summaries is not None:
        try:
            with os.scandir(summaries.path) as listing:
                inner = [
                    e for e in listing if _SHARD.match(e.name) and e.is_dir(follow_symlinks=False)
                ]
        except OSError:
            inner = []
        _sweep_shards(inner, remove_files, _SUMMARY, everything)
        if everything:
            with contextlib.suppress(OSError):
                os.rmdir(summaries.path)
    if everything:
        with contextlib.suppress(OSError):
            os.rmdir(build)


def _sweep_shards(
    shards: list[os.DirEntry],
    remove_files: Callable[[Iterable[os.DirEntry], re.Pattern], None],
    names: re.Pattern,
    everything: bool,
) -> None:
    for shard in shards:
        try:
            with os.scandir(shard.path) as listing:
                remove_files(list(listing), names)
        except OSError:
            continue
        if everything:
            with contextlib.suppress(OSError):
                os.rmdir(shard.path)  # fails, as it should, if anything else is in it


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
        root = cache.root
        self.path = root / self.NAME if root is not None else None
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        self._seen: dict[str, list[int] | None] = {}
        data = _read_regular(self.path) if self.path is not None else None
        try:
            document = json.loads(data) if data is not None else None
            if isinstance(document, dict) and document.get("format") == FORMAT:
                entries = document.get("entries")
                if isinstance(entries, dict):
                    self.entries = entries
        except ValueError:
            pass

    def signature_now(self, path: str) -> list[int] | None:
        """``signature(path)``, asked of the file system once per run: the skip verdicts
        of a package name the same few project modules again and again."""
        if path not in self._seen:
            self._seen[path] = self.signature(path)
        return self._seen[path]

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
        if not self.dirty or self.path is None or not self.cache._prepare():
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
