"""What the output formats share: the run's result, positions and locations as text,
printable messages, file lines for reports, rule links and repository paths.

In a module of its own, so that each format imports it and not the package that lists
the formats (which imports each of them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePath
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

DOCS_URL = "https://ema-lint.readthedocs.io/en/latest/rules/{code}/"


def rule_url(code: str) -> str:
    return DOCS_URL.format(code=code)


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


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with control characters written as escapes (``\\x1b``, ``\\n``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


@dataclass(frozen=True)
class FileSpan:
    """A finding's lines in the file itself; columns only where they are the file's too."""

    start_line: int
    end_line: int
    start_column: int | None
    end_column: int | None


class FileLines:
    """Positions in the file's own lines, for formats that address a file (SARIF, GitHub,
    GitLab). A notebook finding carries lines within its cell; here it gets the ``.ipynb``
    file's line of that cell line (each notebook read once), and no column (a cell's column
    is not the JSON text's)."""

    def __init__(self) -> None:
        self._notebooks: dict[str, dict[int, list[int]] | None] = {}

    def _cells(self, path: str) -> dict[int, list[int]] | None:
        if path not in self._notebooks:
            from ..notebook_json import cell_file_lines

            try:
                text = Path(path).read_bytes().decode("utf-8-sig")
                self._notebooks[path] = cell_file_lines(text)
            except (OSError, UnicodeDecodeError, ValueError, IndexError):
                self._notebooks[path] = None
        return self._notebooks[path]

    def span(self, d: Diagnostic) -> FileSpan:
        if d.cell is None:
            return FileSpan(d.start.line, d.end.line, d.start.column, d.end.column)
        cells = self._cells(d.path) or {}
        lines = cells.get(d.cell) or []

        def file_line(line: int) -> int:
            if not lines:
                return 1
            return lines[min(max(line, 1), len(lines)) - 1]

        return FileSpan(file_line(d.start.line), file_line(d.end.line), None, None)


def repository_root() -> Path | None:
    """The repository the run is in: the CI's checkout folder, else git's top folder."""
    for variable in ("GITHUB_WORKSPACE", "CI_PROJECT_DIR"):
        value = os.environ.get(variable)
        if value:
            return Path(value).resolve()
    from ..gitignore import repository_root as find

    found = find(os.path.abspath(os.getcwd()))
    return Path(found).resolve() if found is not None else None


def repository_path(path: str, root: Path | None) -> str:
    """``path`` relative to the repository's root (as code review tools address files)."""
    if root is not None:
        try:
            return Path(os.path.abspath(path)).resolve().relative_to(root).as_posix()
        except (ValueError, OSError, RuntimeError):
            pass
    return PurePath(os.path.normpath(path)).as_posix()
