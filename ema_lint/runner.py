"""A run over many files: read, lint or fix, write, and collect what to report.

Kept apart from the command line so that the Python API, the pre-commit hooks and the CLI
share one path through the engine.

The parent process reads each file once and settles it when it can: no trigger of the
enabled rules (the pre-filter), or findings already in the cache. Only the files left
need the engine; they go to a process pool (``jobs`` > 1, see ``pool.py``) or are checked
in-process. Outcomes are returned in the order of the files, whatever order the workers
finish in, so the output is the same with any number of jobs.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import collector, dependencies
from .analysis.project import admission
from .analysis.project.admission import project_admits
from .cache import Cache, StatIndex, content_hash, portable, settings_key
from .collector import batch_collection
from .config import Settings
from .decoding import text_for_matching
from .diagnostics import Diagnostic
from .discovery import discover
from .file_settings import FileSettings
from .files import read_regular
from .pool import LazyPool, available_cpus
from .prefilter import PreFilter, for_rules
from .reporters import RunResult
from .writer import WriteRefused, atomic_write, remove_stale_temps

if TYPE_CHECKING:
    from . import sources

# The engine (libcst and the rules) is imported only for a file that has to be parsed: a
# run whose files are all settled by the pre-filter or the cache never loads it.


@dataclass(frozen=True)
class Mode:
    fix: bool = False
    diff: bool = False  # compute fixes, print them as a diff, write nothing
    text_edits: bool = False  # render fixes as text edits (machine-readable formats)

    @property
    def fixing(self) -> bool:
        return self.fix or self.diff


@dataclass
class FileOutcome:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: int = 0
    new_data: bytes | None = None
    diff: str = ""
    error: str | None = None
    note: str | None = None


def read_source(path: Path) -> bytes:
    """A file's bytes; anything but a regular file (a FIFO, ``/dev/zero``) is an OSError."""
    return read_regular(path)


def _decode_for_diff(data: bytes) -> list[str]:
    from . import engine

    return engine.source_lines(data).lines()


def unified_diff(path: str, old: bytes, new: bytes) -> str:
    return "".join(
        difflib.unified_diff(
            _decode_for_diff(old), _decode_for_diff(new), fromfile=path, tofile=path
        )
    )


def process_source(
    data: bytes, display: str, settings: FileSettings, mode: Mode, admitted: bool = False
) -> FileOutcome:
    """Lint or fix one file's bytes (``admitted``: they passed the pre-filter already)."""
    from . import engine, sources

    source = sources.for_path(display)
    if source is not None:
        return _process_other(source, data, display, settings, mode)
    outcome = FileOutcome(display)
    if mode.fixing:
        fixed = engine.fix(data, display, settings, admitted=admitted)
        outcome.diagnostics = fixed.diagnostics
        outcome.fixed = fixed.applied
        if fixed.changed:
            assert isinstance(fixed.fixed, bytes)
            outcome.new_data = fixed.fixed
            if mode.diff:
                outcome.diff = unified_diff(display, data, fixed.fixed)
        if mode.text_edits:
            analysis = engine.analyze(fixed.fixed, display, settings)
            engine.attach_text_edits(analysis)
            errors = [d for d in fixed.diagnostics if d.code == "EMA903"]
            outcome.diagnostics = sorted([*analysis.diagnostics, *errors], key=Diagnostic.sort_key)
    else:
        analysis = engine.analyze(data, display, settings, admitted=admitted)
        if mode.text_edits:
            engine.attach_text_edits(analysis)
        analysis.release()
        outcome.diagnostics = analysis.diagnostics
    return outcome


def _process_other(
    source: sources.Source, data: bytes, display: str, settings: FileSettings, mode: Mode
) -> FileOutcome:
    """Notebooks and YAML configs: their source maps findings and fixes back into the file."""
    if mode.fixing:
        done = source.fix(data, display, settings, text_edits=mode.text_edits)
    else:
        done = source.lint(data, display, settings, text_edits=mode.text_edits)
    outcome = FileOutcome(display, done.diagnostics, done.applied, note=done.note)
    if done.fixed is not None and done.fixed != data:
        outcome.new_data = done.fixed
        if mode.diff:
            outcome.diff = source.diff(display, data, done.fixed)
    return outcome


OUTSIDE_LINK = "a symbolic link to a file outside the folder checked: not fixed unless named itself"


def _process_data(
    path: Path,
    data: bytes,
    file_settings: FileSettings,
    mode: Mode,
    writable: bool = True,
    admitted: bool = False,
) -> FileOutcome:
    """``writable`` False: a fix is reported, never written (a link out of the tree);
    ``admitted``: the bytes passed the pre-filter already (not run twice)."""
    display = str(path)
    outcome = process_source(data, display, file_settings, mode, admitted)
    if outcome.new_data is not None and mode.fix and not mode.diff:
        try:
            if not writable:
                raise WriteRefused(OUTSIDE_LINK, path)
            atomic_write(path, outcome.new_data, expected=data)
        except OSError as error:
            outcome.error = f"{display}: cannot write the fix: {error.strerror or error}"
            # Nothing was written: report the findings as they stand in the file.
            outcome.diagnostics = process_source(data, display, file_settings, Mode()).diagnostics
            outcome.fixed = 0
    collector.release_after(len(data))  # the file's tree is gone: its pages go back too
    return outcome


def _unreadable(display: str, error: OSError) -> FileOutcome:
    return FileOutcome(display, error=f"{display}: cannot read: {error.strerror or error}")


def process_path(path: Path, settings: Settings, mode: Mode) -> FileOutcome:
    display = str(path)
    try:
        data = read_source(path)
    except OSError as error:
        return _unreadable(display, error)
    return _process_data(path, data, settings.for_file(path), mode)


# Settling files in the parent ---------------------------------------------------------------
# Sources whose raw bytes are Python text. Others (a notebook's JSON escapes "\nema" and
# would hide ``ema`` from the byte scan) are filtered by the engine after extraction.
PYTHON_SUFFIXES = (".py", ".pyi")
# From this many files, a run without a cache pre-filters in the workers (fewer: in the
# parent, which may then need no worker, nor libcst, at all).
FILTER_IN_WORKERS_FROM = 64
FILTER_BATCH = 16  # files per task when the workers pre-filter


def _prefilter(file_settings: FileSettings) -> PreFilter:
    # Built from the rules' manifest entries: the rule classes need not be imported. The
    # engine looks up the same filter (``prefilter.for_rules``), prepared before the fork.
    return for_rules(file_settings.filter_rules())


def _cacheable(outcome: FileOutcome, mode: Mode) -> bool:
    """Does the outcome equal the lint of the file as it is (so it may be stored)?"""
    if outcome.error is not None:
        return False
    if mode.fixing:
        # A fix run that changed nothing, and met no broken fix, found what a lint finds.
        return (
            outcome.fixed == 0
            and outcome.new_data is None
            and not any(d.code == "EMA903" for d in outcome.diagnostics)
        )
    return True


def _settle(
    path: Path,
    data: bytes,
    file_settings: FileSettings,
    mode: Mode,
    cache: Cache | None,
) -> tuple[FileOutcome | None, str | None]:
    """The outcome of a file when it needs no engine run (else None), and what was learnt
    about its content for the stat index (``skip:<filter>``, ``sha:<hash>`` or None)."""
    display = str(path)
    python = path.suffix in PYTHON_SUFFIXES
    if file_settings.prefilter and python:
        prefilter = _prefilter(file_settings)
        if not prefilter.matches(text_for_matching(data)):
            consulted: list[str] = []
            if not project_admits(display, data, consulted):
                files = list(dict.fromkeys(consulted))
                return FileOutcome(display), _skip_verdict(prefilter.fingerprint, files)
    if cache is None:
        return None, None
    digest = content_hash(data)
    return _from_cache(digest, display, file_settings, mode, cache), f"sha:{digest}"


def _from_cache(
    digest: str, display: str, file_settings: FileSettings, mode: Mode, cache: Cache
) -> FileOutcome | None:
    found = cache.get(digest, settings_key(file_settings, display, mode.text_edits), display)
    if found is None:
        return None
    if mode.fixing and any(d.fix is not None and file_settings.allows(d.fix) for d in found):
        return None  # a fix would apply: the engine must run to apply it
    return FileOutcome(display, found)


def _skip_verdict(fingerprint: str, imported: list[str]) -> str | None:
    """``skip:<filter>``, with the stat signatures of the project modules the file imports:
    the file was skipped because none of them is about averaging, which holds only while
    they are unchanged (a helper that gains an EMA class makes its importers relevant)."""
    signatures: list[list] = []
    for name in imported:
        if name.startswith(admission.IMPORTERS):
            signatures.append([name])  # no file: the project's files that may import it
            continue
        signature = StatIndex.signature(name)
        if signature is None or time.time() - max(signature[1:3]) / 1e9 < StatIndex.RACY_SECONDS:
            return None  # cannot tell later whether it changed: do not remember the skip
        signatures.append([name, *signature])
    if not signatures:
        return f"skip:{fingerprint}"
    return f"skip:{fingerprint}|{json.dumps(signatures, separators=(',', ':'))}"


def _imports_unchanged(imported: str, stat_index: StatIndex) -> bool:
    """Every project module recorded with a skip verdict still has its signature."""
    if not imported:
        return True
    try:
        entries = json.loads(imported)
    except ValueError:
        return False
    if not isinstance(entries, list):
        return False
    markers: list[str] = []
    for entry in entries:
        if not (isinstance(entry, list) and entry and isinstance(entry[0], str)):
            return False
        if len(entry) == 1 and entry[0].startswith(admission.IMPORTERS):
            markers.append(entry[0])
        elif stat_index.signature_now(entry[0]) != entry[1:]:
            return False
    return all(admission.importers_unchanged(marker) for marker in markers)


def _refreshed(verdict: str) -> str | None:
    """A skip verdict that was found to hold, with its importers keys made anew when
    checking them had to read files changed since (None: nothing to renew)."""
    fingerprint, _, imported = verdict.partition("|")
    if not fingerprint.startswith("skip:") or admission.IMPORTERS not in imported:
        return None
    entries = json.loads(imported)
    renewed = False
    for entry in entries:
        if len(entry) == 1 and entry[0].startswith(admission.IMPORTERS):
            new = admission.refreshed_key(entry[0])
            if new is not None:
                entry[0], renewed = new, True
    if not renewed:
        return None
    return f"{fingerprint}|{json.dumps(entries, separators=(',', ':'))}"


def _settle_known(
    verdict: str,
    path: Path,
    file_settings: FileSettings,
    mode: Mode,
    cache: Cache,
    stat_index: StatIndex,
) -> FileOutcome | None:
    """The outcome of an unchanged file from what the stat index remembers, if it can tell."""
    kind, _, value = verdict.partition(":")
    if kind == "skip":
        fingerprint, _, imported = value.partition("|")
        if (
            file_settings.prefilter
            and path.suffix in PYTHON_SUFFIXES
            and fingerprint == _prefilter(file_settings).fingerprint
            and _imports_unchanged(imported, stat_index)
        ):
            return FileOutcome(str(path))
        return None
    if kind == "sha":
        return _from_cache(value, str(path), file_settings, mode, cache)
    return None


# The engine step, in the parent or in a worker ----------------------------------------------
_worker_state: tuple[Mode, Cache | None] | None = None


def _init_worker(mode: Mode, cache: Cache | None, scratch: str | None = None) -> None:
    global _worker_state, _SCRATCH
    _worker_state = (mode, cache)
    _SCRATCH = scratch


# A task: files as (index, path, settings, unfiltered, writable); unfiltered ones are
# pre-filtered by the worker, and a file not writable has its fix reported, never written (a
# link out of the tree). Files travel in batches so that a run of thousands of files does not
# pay for thousands of round trips to the workers.
_Task = tuple[tuple[int, str, FileSettings, bool, bool], ...]


def _engine_task(task: _Task) -> list[tuple[int, FileOutcome]]:
    return [
        (index, _engine_file(name, fs, unfiltered, writable))
        for index, name, fs, unfiltered, writable in task
    ]


def _engine_file(
    name: str, file_settings: FileSettings, unfiltered: bool, writable: bool
) -> FileOutcome:
    assert _worker_state is not None
    mode, cache = _worker_state
    path = Path(name)
    try:
        data = read_source(path)
    except OSError as error:
        return _unreadable(name, error)
    if (
        unfiltered
        and not _prefilter(file_settings).matches(text_for_matching(data))
        and not project_admits(name, data)
    ):
        return FileOutcome(name)  # what the parent's pre-filter would have settled
    _summaries_in(cache)
    # Here, or in the parent for a Python file (``_settle``), the bytes passed the
    # pre-filter: the engine does not run it again.
    admitted = unfiltered or path.suffix in PYTHON_SUFFIXES
    outcome = _process_data(path, data, file_settings, mode, writable, admitted)
    used = dependencies.take(name)
    if cache is not None and _cacheable(outcome, mode):
        key = settings_key(file_settings, name, mode.text_edits)
        cache.put(content_hash(data), key, outcome.diagnostics, used)
    # Node edits stay behind: they belong to this process's trees and nobody reads them.
    outcome.diagnostics = portable(outcome.diagnostics)
    return outcome


_SUMMARIES_SET = False
_SCRATCH: str | None = None


def _summaries_in(cache: Cache | None) -> None:
    """Keep the project's module summaries next to the results (once per process), or,
    without a cache, in the run's scratch folder that the workers share: a helper module
    imported by files of both workers is then summarised once, not once per worker."""
    global _SUMMARIES_SET
    if _SUMMARIES_SET:
        return
    _SUMMARIES_SET = True
    folder = cache.summaries_folder() if cache is not None else _SCRATCH
    if folder is not None:
        from .analysis.project.model import use_directory

        use_directory(str(folder))


def _load_engine() -> None:
    """Import the engine, the sources and every rule (before forking the workers)."""
    import gc

    from . import engine, registry, sources  # noqa: F401

    registry.all_rules()
    # What is imported now lives as long as the workers: keep the collector, which each
    # parse sets off many times, from walking it (and from touching the forked pages).
    gc.freeze()


def check_files(
    files: Sequence[Path],
    settings: Settings,
    mode: Mode,
    *,
    jobs: int = 1,
    cache: Cache | None = None,
    stats: Sequence[os.stat_result | None] | None = None,
    read_only: Collection[Path] = (),
) -> list[FileOutcome]:
    """The outcome of every file, in the order given (``stats``: their ``os.stat``, if known;
    ``read_only``: files whose fixes are reported but never written)."""
    outcomes: list[FileOutcome | None] = [None] * len(files)
    # More workers than files or CPUs only cost their start (--jobs 1000 on two files).
    jobs = max(1, min(jobs, len(files), available_cpus()))
    # Without a cache, workers share the summaries of the run in a folder that lives as
    # long as the run (no results are kept: the next run starts from nothing).
    scratch = _scratch_folder() if cache is None and jobs > 1 else None
    pool: LazyPool[_Task, list[tuple[int, FileOutcome]]] = LazyPool(
        _engine_task, jobs, _init_worker, (mode, cache, scratch), preload=_load_engine
    )
    try:
        with batch_collection():
            _dispatch(files, settings, mode, cache, pool, outcomes, stats, frozenset(read_only))
            for _, done in pool.results():
                for index, outcome in done:
                    outcomes[index] = outcome
    except BaseException:
        pool.terminate()  # Ctrl-C or a bug: leave no worker behind
        raise
    finally:
        if scratch is not None:
            _release_scratch(scratch)
    return [o for o in outcomes if o is not None]


def _release_scratch(scratch: str) -> None:
    """Remove the run's scratch folder, and stop using it here if the pool ran its only
    task in this process (a long-lived caller's next run must not write into it)."""
    global _SUMMARIES_SET, _SCRATCH
    shutil.rmtree(scratch, ignore_errors=True)
    if scratch == _SCRATCH:
        from .analysis.project.model import STORE, use_directory

        if STORE.directory == scratch:
            use_directory(None)
        _SCRATCH = None
        _SUMMARIES_SET = False


def _scratch_folder() -> str | None:
    try:
        return tempfile.mkdtemp(prefix="ema-lint-run-")
    except OSError:
        return None  # no temporary folder: each worker keeps its summaries in memory


def _dispatch(
    files: Sequence[Path],
    settings: Settings,
    mode: Mode,
    cache: Cache | None,
    pool: LazyPool[_Task, list[tuple[int, FileOutcome]]],
    outcomes: list[FileOutcome | None],
    stats: Sequence[os.stat_result | None] | None = None,
    read_only: frozenset[Path] = frozenset(),
) -> None:
    """Settle what the parent can; submit the rest to the pool."""
    stat_index = StatIndex(cache) if cache is not None else None
    known_stats = stats if stats is not None and len(stats) == len(files) else None
    cwd = os.getcwd() if stat_index is not None else ""
    # Without a cache the parent needs nothing from a file's bytes: on a large run the
    # workers read and pre-filter the files themselves, in parallel.
    in_workers = cache is None and pool.jobs > 1 and len(files) >= FILTER_IN_WORKERS_FROM
    batch: list[tuple[int, str, FileSettings, bool, bool]] = []
    for index, path in enumerate(files):
        # Discovery found files (a path named on the command line may not exist: no folder).
        file_settings = settings.for_file(path, is_dir=False)
        if in_workers and file_settings.prefilter and path.suffix in PYTHON_SUFFIXES:
            _prefilter(file_settings).prepare()  # built once here, before the fork
            batch.append((index, str(path), file_settings, True, path not in read_only))
            if len(batch) == FILTER_BATCH:
                pool.submit(batch[0][0], tuple(batch))
                batch = []
            continue
        where, signature = "", None
        if stat_index is not None:
            # Unchanged since the last run (same stat signature): no need to even read it.
            where = _absolute(path, cwd)
            found = known_stats[index] if known_stats is not None else None
            signature = (
                StatIndex.signature_of(found) if found is not None else stat_index.signature(where)
            )
            verdict = stat_index.get(where, signature)
            if verdict is not None:
                assert cache is not None
                known = _settle_known(verdict, path, file_settings, mode, cache, stat_index)
                if known is not None:
                    outcomes[index] = known
                    fresh = _refreshed(verdict)
                    if fresh is not None:
                        stat_index.record(where, signature, fresh)
                    continue
        try:
            data = read_source(path)
        except OSError as error:
            outcomes[index] = _unreadable(str(path), error)
            continue
        settled, learnt = _settle(path, data, file_settings, mode, cache)
        if stat_index is not None and learnt is not None:
            stat_index.record(where, signature, learnt)
        if settled is not None:
            outcomes[index] = settled
        else:
            pool.submit(index, ((index, str(path), file_settings, False, path not in read_only),))
    if batch:
        pool.submit(batch[0][0], tuple(batch))
    if cache is not None and stat_index is not None:
        stat_index.save()
        cache.prune()


def _absolute(path: Path, cwd: str) -> str:
    """``os.path.abspath``, without its normalisation where a Path has none left to do."""
    text = str(path)
    if ".." in text or text == ".":
        return os.path.abspath(text)
    if text.startswith("/"):
        return text
    return os.path.join(cwd, text)


def run(
    paths: Sequence[Path],
    settings: Settings,
    mode: Mode,
    *,
    force_exclude: bool = False,
    jobs: int = 1,
    cache: Cache | None = None,
) -> tuple[RunResult, list[FileOutcome]]:
    """Check (or fix) every file under ``paths``, with ``jobs`` processes and a cache.

    A configuration error stops the run before any file is read or written: linting with
    the defaults instead would report what the user turned off, and fix what they excluded.
    """
    settings.check_config(paths)
    if settings.errors:
        return _stopped(settings.errors), []
    found = discover(paths, settings, force_exclude=force_exclude)
    if settings.errors:  # a configuration file met while walking
        return _stopped([*settings.errors, *found.errors]), []
    if mode.fix and not mode.diff:  # what a killed --fix left next to these files
        remove_stale_temps(dict.fromkeys(path.parent for path in found.files))
    outcomes = check_files(
        found.files,
        settings,
        mode,
        jobs=jobs,
        cache=cache,
        stats=found.stats,
        read_only=found.outside_links,
    )
    result = collect(outcomes, mode)
    result.errors = [*settings.errors, *found.errors, *result.errors]
    result.files_checked = len(found.files)
    return result, outcomes


def _stopped(errors: Sequence[str]) -> RunResult:
    result = RunResult()
    result.errors = list(errors)
    return result


def collect(outcomes: Iterable[FileOutcome], mode: Mode) -> RunResult:
    result = RunResult(fix_mode=mode.fix and not mode.diff)
    for outcome in outcomes:
        result.diagnostics.extend(outcome.diagnostics)
        result.fixed += outcome.fixed
        if outcome.error:
            result.errors.append(outcome.error)
        if outcome.note and outcome.note not in result.notes:
            result.notes.append(outcome.note)
    result.diagnostics.sort(key=Diagnostic.sort_key)
    return result
