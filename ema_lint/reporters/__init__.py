"""Output formats. Each takes the run's results and writes them to a stream."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from ..diagnostics import Applicability, Diagnostic


@dataclass
class RunResult:
    """Everything a reporter may show about one run."""

    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one-line errors: paths, configuration
    files_checked: int = 0
    fixed: int = 0
    fix_mode: bool = False
    unsafe_fixes: bool = False

    def fixable(self, diagnostic: Diagnostic) -> bool:
        """Would ``--fix`` (with the current unsafe setting) repair it?"""
        fix = diagnostic.fix
        if fix is None:
            return False
        return fix.applicability is Applicability.SAFE or self.unsafe_fixes

    @property
    def fixable_count(self) -> int:
        return sum(1 for d in self.diagnostics if self.fixable(d))

    @property
    def hidden_unsafe_count(self) -> int:
        if self.unsafe_fixes:
            return 0
        return sum(
            1
            for d in self.diagnostics
            if d.fix is not None and d.fix.applicability is Applicability.UNSAFE
        )


Renderer = Callable[[RunResult, TextIO, bool], None]


def renderers() -> dict[str, Renderer]:
    from . import json_format, text

    return {
        "text": text.render_full,
        "concise": text.render_concise,
        "json": json_format.render,
    }


def location_text(diagnostic: Diagnostic) -> str:
    """``path:line:col``, or ``path:cell 3:line:col`` for notebooks."""
    if diagnostic.cell is not None:
        return f"{diagnostic.path}:cell {diagnostic.cell}:{diagnostic.line}:{diagnostic.column}"
    return f"{diagnostic.path}:{diagnostic.line}:{diagnostic.column}"
