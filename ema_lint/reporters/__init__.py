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
    # One-line notes that do not change the exit code (e.g. YAML skipped: extra missing).
    notes: list[str] = field(default_factory=list)
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

# Where each rule's documentation page is published (the docs site, docs/rules/CODE.md).
DOCS_URL = "https://ema-lint.readthedocs.io/en/latest/rules/{code}/"


def rule_url(code: str) -> str:
    return DOCS_URL.format(code=code)


def renderers() -> dict[str, Renderer]:
    """Every output format by name, in the order ``--help`` lists them."""
    from . import github, gitlab, grouped, json_format, junit, sarif, text

    return {
        "text": text.render_full,
        "concise": text.render_concise,
        "grouped": grouped.render,
        "json": json_format.render,
        "sarif": sarif.render,
        "github": github.render,
        "gitlab": gitlab.render,
        "junit": junit.render,
    }


def position_text(diagnostic: Diagnostic) -> str:
    """``line:col``, or ``cell 3:line:col`` for notebooks (the location without the path)."""
    if diagnostic.cell is not None:
        return f"cell {diagnostic.cell}:{diagnostic.line}:{diagnostic.column}"
    return f"{diagnostic.line}:{diagnostic.column}"


def location_text(diagnostic: Diagnostic) -> str:
    """``path:line:col``, or ``path:cell 3:line:col`` for notebooks."""
    return f"{diagnostic.path}:{position_text(diagnostic)}"


def located_message(diagnostic: Diagnostic) -> str:
    """The message, prefixed with the cell for formats that only address a file's lines."""
    if diagnostic.cell is not None:
        return f"cell {diagnostic.cell}, line {diagnostic.line}: {diagnostic.message}"
    return diagnostic.message
