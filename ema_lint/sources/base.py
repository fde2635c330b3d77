"""What the sources share: ``SourceOutcome`` and the ``Source`` protocol.

In a module of its own, so that each source imports it and not the package that lists
the sources (which imports each of them).
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
