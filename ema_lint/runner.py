"""A run over many files: read, lint or fix, write, and collect what to report.

Kept apart from the command line so that the Python API, the pre-commit hooks and the CLI
share one path through the engine.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import engine, sources
from .config import Settings
from .diagnostics import Diagnostic
from .discovery import discover
from .reporters import RunResult
from .writer import atomic_write


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
    with open(path, "rb") as handle:
        return handle.read()


def _decode_for_diff(data: bytes) -> list[str]:
    return engine.source_lines(data).text.splitlines(keepends=True)


def unified_diff(path: str, old: bytes, new: bytes) -> str:
    return "".join(
        difflib.unified_diff(
            _decode_for_diff(old), _decode_for_diff(new), fromfile=path, tofile=path
        )
    )


def process_source(
    data: bytes, display: str, settings: engine.FileSettings, mode: Mode
) -> FileOutcome:
    """Lint or fix one file's bytes."""
    source = sources.for_path(display)
    if source is not None:
        return _process_other(source, data, display, settings, mode)
    outcome = FileOutcome(display)
    if mode.fixing:
        fixed = engine.fix(data, display, settings)
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
        analysis = engine.analyze(data, display, settings)
        if mode.text_edits:
            engine.attach_text_edits(analysis)
        outcome.diagnostics = analysis.diagnostics
    return outcome


def _process_other(
    source: sources.Source, data: bytes, display: str, settings: engine.FileSettings, mode: Mode
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


def process_path(path: Path, settings: Settings, mode: Mode) -> FileOutcome:
    display = str(path)
    try:
        data = read_source(path)
    except OSError as error:
        return FileOutcome(display, error=f"{display}: cannot read: {error.strerror or error}")
    outcome = process_source(data, display, settings.for_file(path), mode)
    if outcome.new_data is not None and mode.fix and not mode.diff:
        try:
            atomic_write(path, outcome.new_data)
        except OSError as error:
            outcome.error = f"{display}: cannot write the fix: {error.strerror or error}"
            # Nothing was written: report the findings as they stand in the file.
            outcome.diagnostics = process_source(
                data, display, settings.for_file(path), Mode()
            ).diagnostics
            outcome.fixed = 0
    return outcome


def run(
    paths: Sequence[Path],
    settings: Settings,
    mode: Mode,
    *,
    force_exclude: bool = False,
) -> tuple[RunResult, list[FileOutcome]]:
    """Check (or fix) every file under ``paths``."""
    settings.check_config(paths)
    found = discover(paths, settings, force_exclude=force_exclude)
    outcomes = [process_path(path, settings, mode) for path in found.files]
    result = collect(outcomes, mode)
    result.errors = [*settings.errors, *found.errors, *result.errors]
    result.files_checked = len(found.files)
    return result, outcomes


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
