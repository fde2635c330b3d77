"""Sources: files that are not plain Python, turned into lintable Python and mapped back.

A source reads one kind of file (a Jupyter notebook, a YAML training config), hands the
engine ordinary Python text, and maps what the engine says back into the file: each
finding's position, each fix. Rules never know where their module came from. Plain
``.py``/``.pyi`` files need no source: the runner hands their bytes to the engine directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..diagnostics import Diagnostic
from ..engine import FileSettings


@dataclass
class SourceOutcome:
    """What linting or fixing one file of a source gave."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed: bytes | None = None  # the new file content, when a fix changed it
    applied: int = 0
    note: str | None = None  # a one-line note (the file was skipped by design)


class Source(Protocol):
    suffixes: tuple[str, ...]

    def lint(
        self, data: bytes, path: str, settings: FileSettings, *, text_edits: bool = False
    ) -> SourceOutcome: ...

    def fix(
        self, data: bytes, path: str, settings: FileSettings, *, text_edits: bool = False
    ) -> SourceOutcome: ...

    def diff(self, path: str, old: bytes, new: bytes) -> str: ...


def _sources() -> tuple[Source, ...]:
    from . import notebook, yaml_config

    return (notebook.SOURCE, yaml_config.SOURCE)


def for_path(path: str) -> Source | None:
    """The source that reads ``path`` (by suffix), or None for Python files."""
    lowered = path.lower()
    for source in _sources():
        if lowered.endswith(source.suffixes):
            return source
    return None


def suffixes() -> tuple[str, ...]:
    """Every suffix a source reads: directory discovery includes these files."""
    return tuple(s for source in _sources() for s in source.suffixes)
