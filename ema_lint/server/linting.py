"""One open document through the engine: findings placed in its text, and the new texts
its code actions offer (one fix, fix all, a ``# noqa`` comment).

The same path as ``ema-lint check``: the settings of the file's configuration
(``Settings.for_file``), the engine for Python, ``ema_lint.sources`` for notebooks and YAML
configs, ``runner.process_source`` for fix all. Findings are kept per document version, so
that code actions and hover answer from the lint the editor shows.
"""

from __future__ import annotations

import os
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

from .. import engine, sources
from ..config import Settings
from ..diagnostics import Applicability, Diagnostic
from ..file_settings import FileSettings
from ..runner import Mode, process_source
from . import text as textlib
from .cells import CellMap

PYTHON_SUFFIXES = (".py", ".pyi")
_NOQA_CODES = re.compile(
    r"#\s*noqa:\s?(?P<codes>[A-Za-z][A-Za-z0-9-]*(?:[ \t]*,[ \t]*[A-Za-z][A-Za-z0-9-]*)*)",
    re.IGNORECASE,
)
_BLANKET_NOQA = re.compile(r"#\s*noqa\b(?!:)", re.IGNORECASE)


def checked(path: str) -> bool:
    """Whether the server lints a document of this name (what ``ema-lint check`` reads)."""
    return path.lower().endswith(PYTHON_SUFFIXES) or sources.for_path(path) is not None


@dataclass(eq=False)
class Finding:
    """A diagnostic and where it sits in the document's text (character offsets)."""

    diagnostic: Diagnostic
    start: int
    end: int
    line: int  # 0-based line of the document where the finding starts

    @property
    def unsafe(self) -> bool:
        fix = self.diagnostic.fix
        return fix is not None and fix.applicability is Applicability.UNSAFE


@dataclass(eq=False)
class Lint:
    """The findings of one version of a document."""

    path: str
    text: str
    settings: FileSettings
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # config errors, a skipped YAML file
    cells: CellMap | None = None

    @property
    def kind(self) -> str:
        if self.path.lower().endswith(".ipynb"):
            return "notebook"
        if sources.for_path(self.path) is not None:
            return "yaml"
        return "python"


def settings_for(path: Path, roots: Sequence[Path] = ()) -> tuple[FileSettings, list[str], bool]:
    """The file's settings from its project's configuration (read afresh: the editor may
    have changed it), the configuration's errors, and whether the file is excluded."""
    settings = Settings()
    file_settings = settings.for_file(path)
    excluded = _excluded(settings, path, roots)
    return file_settings, list(settings.errors), excluded


def _excluded(settings: Settings, path: Path, roots: Sequence[Path]) -> bool:
    """Whether walking the project would skip the file: it, or a folder above it up to the
    workspace folder holding it (else the project's root), matches an exclude pattern of
    the configuration governing that folder's parent, as in ``ema-lint check .``."""
    path = Path(os.path.abspath(path))
    holding = [r for r in roots if path.is_relative_to(r)]
    top = max(holding, key=lambda r: len(r.parts)) if holding else None
    if top is None:
        top = settings.config_for(path).root
        if not path.is_relative_to(top):
            return not settings.kept_files(path.parent, [path.name])
    folder, name = path.parent, path.name
    while True:
        if not settings.kept_files(folder, [name]):
            return True
        if folder == top or folder.parent == folder:
            return False
        folder, name = folder.parent, folder.name


def lint(text: str, path: Path, roots: Sequence[Path] = ()) -> Lint:
    """The findings of ``text``, the content of the document at ``path``; ``roots`` are the
    editor's workspace folders."""
    file_settings, errors, excluded = settings_for(path, roots)
    result = Lint(str(path), text, file_settings, notes=errors)
    if excluded or not checked(result.path):
        return result
    lines = textlib.Lines(text)
    if result.kind == "python":
        analysis = engine.analyze(text, result.path, file_settings)
        engine.attach_text_edits(analysis)
        diagnostics = analysis.diagnostics
    else:
        source = sources.for_path(result.path)
        assert source is not None
        outcome = source.lint(text.encode("utf-8"), result.path, file_settings, text_edits=True)
        diagnostics = outcome.diagnostics
        if outcome.note:
            result.notes.append(outcome.note)
    if result.kind == "notebook":
        result.cells = CellMap(text)
    for d in diagnostics:
        result.findings.append(_place(result, lines, d))
    return result


def _place(result: Lint, lines: textlib.Lines, d: Diagnostic) -> Finding:
    if result.cells is not None:
        start = result.cells.offset(d.cell, d.start)
        end = result.cells.offset(d.cell, d.end)
    else:
        start = lines.offset_of(d.start.line, d.start.column)
        end = lines.offset_of(d.end.line, d.end.column)
    return Finding(d, start, max(start, end), lines.line_of(start))


# Code actions ----------------------------------------------------------------------------
def fixed_text(result: Lint, finding: Finding) -> str | None:
    """The document's text with this finding's fix applied alone (None: no usable fix)."""
    d = finding.diagnostic
    if d.fix is None or not d.text_edits:
        return None
    if result.cells is not None:
        if d.cell is None:
            return None
        return result.cells.with_cell_edits(d.cell, d.text_edits)
    lines = textlib.Lines(result.text)
    edits = [
        textlib.Edit(
            lines.offset_of(e.start.line, e.start.column),
            lines.offset_of(e.end.line, e.end.column),
            e.content,
        )
        for e in d.text_edits
    ]
    try:
        new = textlib.apply(result.text, edits)
    except ValueError:
        return None
    if result.kind == "python" and not _compiles(new):
        return None  # never offer an edit that breaks the file
    return new


def fix_all(result: Lint) -> str | None:
    """The text with every fix the configuration allows applied, as ``--fix`` would."""
    if result.kind == "python":
        outcome = engine.fix(result.text, result.path, result.settings)
        return outcome.fixed if outcome.applied and isinstance(outcome.fixed, str) else None
    data = result.text.encode("utf-8")
    done = process_source(data, result.path, result.settings, Mode(fix=True))
    if done.new_data is None or done.new_data == data:
        return None
    return done.new_data.decode("utf-8")


def suppressed_text(result: Lint, finding: Finding) -> str | None:
    """The text with a ``# noqa: CODE`` comment that silences this finding."""
    d = finding.diagnostic
    if result.cells is not None:
        if d.cell is None:
            return None
        cell_text = result.cells.cell_text(d.cell)
        if cell_text is None:
            return None
        lines = [d.start.line - 1]
        if d.statement_line is not None:
            lines.append(d.statement_line - 1)
        # A cell may hold IPython syntax: only the comment itself is checked.
        new_cell = _with_python_noqa(cell_text, lines, d.code, compiles=False)
        return None if new_cell is None else result.cells.with_cell(d.cell, new_cell)
    if result.kind == "python":
        lines = [finding.line]
        if d.statement_line is not None:
            lines.append(d.statement_line - 1)
        return _with_python_noqa(result.text, lines, d.code)
    return _with_noqa(result.text, finding.line, d.code)  # a YAML comment


def _with_noqa(text: str, line: int, code: str) -> str | None:
    lines = textlib.Lines(text)
    current = lines.line_text(line)
    if _BLANKET_NOQA.search(current):
        return None
    found = _NOQA_CODES.search(current)
    if found is not None:
        codes = [c.strip().upper() for c in found.group("codes").split(",")]
        if code in codes:
            return None
        end = found.end("codes")
        new_line = current[:end] + f", {code}" + current[end:]
    else:
        stripped = current.rstrip()
        if not stripped:
            return None
        new_line = f"{stripped}  # noqa: {code}"
    start = lines.starts[line]
    return text[:start] + new_line + text[start + len(current) :]


def _with_python_noqa(
    text: str, candidates: list[int], code: str, *, compiles: bool = True
) -> str | None:
    """A noqa comment on the first candidate line where it is a comment (not inside a
    string, not after a line continuation) and the code still compiles."""
    for line in dict.fromkeys(candidates):
        new = _with_noqa(text, line, code)
        if new is None or (compiles and not _compiles(new)):
            continue
        if _comment_on(new, line):
            return new
    return None


def _compiles(text: str) -> bool:
    try:
        compile(text, "<document>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _comment_on(text: str, line: int) -> bool:
    try:
        for token in tokenize.generate_tokens(StringIO(text).readline):
            if token.type == tokenize.COMMENT and token.start[0] == line + 1:
                return "noqa" in token.string.lower()
    except (tokenize.TokenError, SyntaxError):
        return False
    return False
