"""Jupyter notebooks: the code cells linted as one module, findings and fixes mapped per cell.

The cells are joined into one module, in order, so that an import or a constant of cell 1
resolves in cell 3 (rules need imports to know which API a call is). Each cell is preceded
by a marker comment line; a finding's line in the joined module maps back to (cell, line
in the cell), with columns unchanged. IPython syntax is masked line by line, keeping the
line count and every other column: line magics (``%matplotlib inline``), shell escapes
(``!pip install``, ``files = !ls``), help (``obj?``, ``??obj``) become ``pass``, only in
cells that do not compile as they are. A cell magic (``%%bash``) skips its cell, except the
magics whose body is Python (``%%time``, ``%%capture``, ...), which lose only their first
line. A cell that does not compile is reported (EMA901, with its cell) and left out; the
others are still checked. Notebooks whose kernel is not Python are skipped.

Reading follows nbformat 4's JSON schema with the standard library (nbformat itself is not
a dependency). Fixing splits the fixed module at the markers, restores the masked lines,
and rewrites in the file only the ``source`` value of each changed cell, serialized in the
style of the value it replaces (a string, or a list of lines with the same indentation and
escaping); every other byte of the file (outputs, metadata, key order, indentation, final
newline) is kept.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import json
import re
from dataclasses import dataclass, field, replace

from .. import engine, registry
from ..diagnostics import Diagnostic, Position, TextEdit
from ..engine import FileSettings
from ..notebook_json import _skip, _value_end, source_spans
from .base import SourceOutcome

# Cell magics whose body is Python: the first line is masked, the body is linted.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "python", "python3"})

_MARKER = "# ema-lint-cell: {index}"
_MARKER_LINE = re.compile(r"^# ema-lint-cell: (\d+)\r?\n?$")
_MASK = "pass  # ema-lint-masked-line: {index}"
_MASK_LINE = re.compile(r"^([ \t]*)pass  # ema-lint-masked-line: (\d+)(\r\n|\r|\n)?$")
# IPython escapes at the start of a line: magics, shell, help; and `x = !cmd` / `x = %magic`.
_ESCAPE = re.compile(
    r"^[ \t]*(?:[%!]|\?|[\w.]+[ \t]*=[ \t]*[%!])"
    r"|^[ \t]*[\w.\[\]()'\"]+\?{1,2}[ \t]*$"
)
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_ESCAPED_NON_ASCII = re.compile(
    r"\\u(?:00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})"
)
_COMPILE_FLAGS = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


class NotebookError(Exception):
    """The file is not a notebook that can be read; ``line``/``column`` in the file."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split as the engine counts lines (LF, CRLF, CR)."""
    return _LINES.findall(text)


@dataclass
class Cell:
    """One code cell: its number in the notebook and its text, masked for linting."""

    number: int  # 1-based position among all cells of the notebook
    text: str
    masked: str
    masked_lines: dict[int, str] = field(default_factory=dict)  # mask index -> original line
    skipped: bool = False  # a cell magic whose body is not Python
    start: int = 0  # line of the joined module where the cell's first line is


@dataclass
class Notebook:
    text: str  # the file, decoded
    bom: bool
    document: dict
    cells: list[Cell]
    python: bool  # the kernel is Python (or unknown)
    ensure_ascii: bool


def _decode(data: bytes | str) -> tuple[str, bool]:
    if isinstance(data, str):
        return (data[1:], True) if data.startswith("\ufeff") else (data, False)
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8-sig"), bom
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = before.count(b"\n") + 1
        column = error.start - (before.rfind(b"\n") + 1) + 1
        raise NotebookError(
            f"cannot decode notebook as UTF-8: byte 0x{data[error.start]:02x} is not valid here",
            line,
            column,
        ) from None


def _source_text(cell: dict, number: int) -> str:
    source = cell.get("source", "")
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    raise NotebookError(f"cell {number}: 'source' must be a string or a list of strings")


def _is_python(document: dict) -> bool:
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return True
    for key, field_name in (("kernelspec", "language"), ("language_info", "name")):
        info = metadata.get(key)
        if isinstance(info, dict) and isinstance(info.get(field_name), str):
            return info[field_name].lower() in ("python", "python3", "ipython", "ipython3")
    return True


def read(data: bytes | str) -> Notebook:
    """Parse a notebook (nbformat 4 JSON) into its code cells."""
    text, bom = _decode(data)
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        message = f"invalid notebook JSON: {error.msg}"
        raise NotebookError(message, error.lineno, error.colno) from None
    except RecursionError:
        raise NotebookError("invalid notebook JSON: nested too deeply") from None
    if not isinstance(document, dict) or not isinstance(document.get("cells"), list):
        if isinstance(document, dict) and "worksheets" in document:
            raise NotebookError(
                "nbformat 3 notebooks are not supported; "
                "convert it with 'jupyter nbconvert --to notebook'"
            )
        raise NotebookError("not a Jupyter notebook: no 'cells' list (nbformat 4 expected)")
    cells: list[Cell] = []
    for position, raw in enumerate(document["cells"]):
        number = position + 1
        if not isinstance(raw, dict):
            raise NotebookError(f"cell {number} is not an object")
        if raw.get("cell_type") != "code":
            continue
        cells.append(mask(number, _source_text(raw, number)))
    return Notebook(
        text=text,
        bom=bom,
        document=document,
        cells=cells,
        python=_is_python(document),
        ensure_ascii=bool(_ESCAPED_NON_ASCII.search(text)),
    )


def _compiles(text: str) -> bool:
    try:
        compile(text, "<cell>", "exec", flags=_COMPILE_FLAGS, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def mask(number: int, text: str) -> Cell:
    """The cell with its IPython-only lines replaced by ``pass`` (same lines and columns)."""
    lines = split_lines(text)
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    cell = Cell(number, text, text)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(None, 1)
        if not name or name[0] not in PYTHON_CELL_MAGICS:
            cell.skipped = True
            return cell
        masked = list(lines)
        _mask_line(cell, masked, first)
        cell.masked = "".join(masked)
        if _compiles(cell.masked):
            return cell
        lines = masked
    elif _compiles(text):
        return cell
    masked = list(lines)
    for i, line in enumerate(lines):
        if _ESCAPE.match(line) and not line.lstrip().startswith("#"):
            _mask_line(cell, masked, i)
    cell.masked = "".join(masked)
    return cell


def _mask_line(cell: Cell, lines: list[str], i: int) -> None:
    line = lines[i]
    if _MASK_LINE.match(line):
        return
    body = line.rstrip("\r\n")
    ending = line[len(body) :]
    indent = body[: len(body) - len(body.lstrip(" \t"))]
    index = len(cell.masked_lines)
    cell.masked_lines[index] = body
    lines[i] = indent + _MASK.format(index=index) + ending


def unmask(cell: Cell, masked: str) -> str | None:
    """A (fixed) masked text with its masked lines restored; None if they were disturbed."""
    out: list[str] = []
    seen: set[int] = set()
    for line in split_lines(masked):
        match = _MASK_LINE.match(line)
        if match is None:
            out.append(line)
            continue
        index = int(match.group(2))
        if index in seen or index not in cell.masked_lines:
            return None
        seen.add(index)
        out.append(cell.masked_lines[index] + (match.group(3) or ""))
    if seen != set(cell.masked_lines):
        return None
    return "".join(out)


# The joined module -----------------------------------------------------------------------
@dataclass
class Joined:
    text: str
    cells: list[Cell]  # the cells in the module, in order
    starts: list[int]  # line of each cell's marker

    def locate(self, position: Position) -> tuple[Cell, Position]:
        """(cell, position in the cell) of a position of the joined module."""
        i = max(bisect.bisect_right(self.starts, position.line) - 1, 0)
        cell = self.cells[i]
        line = position.line - cell.start + 1
        if line < 1:  # on a marker line: the cell's first line
            return cell, Position(1, 1)
        return cell, Position(line, position.column)


def join(cells: list[Cell]) -> Joined:
    parts: list[str] = []
    starts: list[int] = []
    line = 1
    for cell in cells:
        starts.append(line)
        parts.append(_MARKER.format(index=cell.number) + "\n")
        cell.start = line + 1
        body = cell.masked
        if body and not body.endswith(("\n", "\r")):
            body += "\n"
        parts.append(body)
        line += 1 + len(split_lines(body))
    return Joined("".join(parts), cells, starts)


def split(joined: Joined, text: str) -> dict[int, str] | None:
    """The fixed module cut back into cells' masked texts (None if the markers moved)."""
    result: dict[int, list[str]] = {}
    current: int | None = None
    head: list[str] = []
    order: list[int] = []
    for line in split_lines(text):
        match = _MARKER_LINE.match(line)
        if match is not None:
            current = int(match.group(1))
            if current in result:
                return None
            result[current] = []
            order.append(current)
            continue
        (head if current is None else result[current]).append(line)
    if order != [cell.number for cell in joined.cells]:
        return None
    if head and order:
        # Lines placed above the first marker (an added import) belong to the first cell.
        result[order[0]] = head + result[order[0]]
    texts: dict[int, str] = {}
    for cell in joined.cells:
        body = "".join(result[cell.number])
        if not cell.masked.endswith(("\n", "\r")) and body.endswith("\n"):
            body = body[:-1]
        texts[cell.number] = body
    return texts


# Mapping findings back -------------------------------------------------------------------
def _map(diagnostic: Diagnostic, joined: Joined) -> Diagnostic:
    cell, start = joined.locate(diagnostic.start)
    end_cell, end = joined.locate(diagnostic.end)
    if end_cell is not cell:
        end = start
    statement_line = None
    if diagnostic.statement_line is not None:
        statement_cell, statement = joined.locate(Position(diagnostic.statement_line, 1))
        statement_line = statement.line if statement_cell is cell else start.line
    edits = None
    if diagnostic.text_edits is not None:
        mapped: list[TextEdit] = []
        for edit in diagnostic.text_edits:
            edit_cell, edit_start = joined.locate(edit.start)
            edit_end_cell, edit_end = joined.locate(edit.end)
            if (
                edit_cell is cell
                and edit_end_cell is cell
                and _outside_masks(cell, edit_start, edit_end)
            ):
                mapped.append(TextEdit(edit_start, edit_end, edit.content))
        # An edit that crosses cells or masked lines cannot be shown: show none.
        edits = tuple(mapped) if len(mapped) == len(diagnostic.text_edits) else ()
    return replace(
        diagnostic,
        start=start,
        end=end,
        cell=cell.number,
        statement_line=statement_line,
        text_edits=edits,
    )


def _outside_masks(cell: Cell, start: Position, end: Position) -> bool:
    if not cell.masked_lines:
        return True
    lines = split_lines(cell.masked)
    for line_number in range(start.line, end.line + 1):
        if 0 < line_number <= len(lines) and _MASK_LINE.match(lines[line_number - 1]):
            return False
    return True


def _parse_errors(nb: Notebook, path: str) -> tuple[list[Cell], list[Diagnostic]]:
    """The cells to lint, and EMA901 for each code cell that does not compile."""
    good: list[Cell] = []
    errors: list[Diagnostic] = []
    for cell in nb.cells:
        if cell.skipped or not cell.masked.strip():
            continue
        try:
            compile(cell.masked, "<cell>", "exec", flags=_COMPILE_FLAGS, dont_inherit=True)
        except SyntaxError as error:
            message = f"cannot parse cell {cell.number}: {error.msg or 'invalid syntax'}"
            errors.append(_unparseable(path, message, error.lineno, error.offset, cell.number))
            continue
        except (ValueError, RecursionError, MemoryError):
            continue
        good.append(cell)
    return good, errors


def _unparseable(
    path: str, message: str, line: int | None, column: int | None, cell: int | None = None
) -> Diagnostic:
    """EMA901 (the file, or one cell, could not be read)."""
    position = Position(max(line or 1, 1), max(column or 1, 1))
    name = registry.by_code()["EMA901"].name
    return Diagnostic("EMA901", name, message, path, position, position, cell=cell)


def _file_error(path: str, error: NotebookError) -> Diagnostic:
    return _unparseable(path, str(error), error.line, error.column)


def _prepare(
    data: bytes | str, path: str, settings: FileSettings
) -> tuple[Notebook | None, Joined | None, list[Diagnostic]]:
    try:
        nb = read(data)
    except NotebookError as error:
        return None, None, [] if "EMA901" in settings.ignored else [_file_error(path, error)]
    if not nb.python:
        return nb, None, []
    cells, errors = _parse_errors(nb, path)
    if "EMA901" in settings.ignored:
        errors = []
    if not cells:
        return nb, None, errors
    return nb, join(cells), errors


def _lint(
    data: bytes | str, path: str, settings: FileSettings, text_edits: bool
) -> list[Diagnostic]:
    _, joined, errors = _prepare(data, path, settings)
    if joined is None:
        return errors
    analysis = engine.analyze(joined.text, path, settings)
    if text_edits:
        engine.attach_text_edits(analysis)
    found = [_map(d, joined) for d in analysis.diagnostics]
    return sorted([*errors, *found], key=Diagnostic.sort_key)


# Writing the notebook back ---------------------------------------------------------------
def serialize_source(old: str, new_text: str, ensure_ascii: bool) -> str:
    """``new_text`` as a JSON ``source`` value in the style of the ``old`` value's text."""
    if not old.startswith("["):
        return json.dumps(new_text, ensure_ascii=ensure_ascii)
    items = [json.dumps(line, ensure_ascii=ensure_ascii) for line in new_text.splitlines(True)]
    if not items:
        return "[]"
    inner = old[1:-1]
    if "\n" not in inner:
        return "[" + _separator(inner).join(items) + "]"
    newline = "\r\n" if "\r\n" in inner else "\n"
    indent = re.match(r"[\r\n]*([ \t]*)", inner).group(1)  # type: ignore[union-attr]
    closing = inner[inner.rfind("\n") + 1 :]
    if closing.strip():
        closing = ""
    return (
        "["
        + newline
        + ("," + newline).join(indent + item for item in items)
        + newline
        + closing
        + "]"
    )


def _separator(inner: str) -> str:
    """The text between the first two items of a one-line list (``", "`` when unknown)."""
    start = _skip(inner, 0)
    if start >= len(inner):
        return ", "
    end = _value_end(inner, start)
    after = _skip(inner, end)
    if inner[after : after + 1] != ",":
        return ", "
    return inner[end : _skip(inner, after + 1)]


def write_cells(nb: Notebook, new_texts: dict[int, str]) -> bytes:
    """The notebook's bytes with the ``source`` of the given cells replaced."""
    text = nb.text
    spans = source_spans(text)
    for number in sorted(new_texts, reverse=True):
        start, end = spans[number]
        text = (
            text[:start]
            + serialize_source(text[start:end], new_texts[number], nb.ensure_ascii)
            + text[end:]
        )
    return (b"\xef\xbb\xbf" if nb.bom else b"") + text.encode("utf-8")


def _fix(data: bytes | str, path: str, settings: FileSettings, text_edits: bool) -> SourceOutcome:
    nb, joined, errors = _prepare(data, path, settings)
    if nb is None or joined is None:
        return SourceOutcome(errors)
    outcome = engine.fix(joined.text, path, settings)
    fixed_text = outcome.fixed
    assert isinstance(fixed_text, str)
    new_texts: dict[int, str] = {}
    if outcome.applied and fixed_text != joined.text:
        cut = split(joined, fixed_text)
        if cut is not None:
            for cell in joined.cells:
                restored = unmask(cell, cut[cell.number])
                if restored is not None and restored != cell.text:
                    new_texts[cell.number] = restored
    if not new_texts:
        return SourceOutcome(_lint(data, path, settings, text_edits))
    new_data = write_cells(nb, new_texts)
    remaining = _lint(new_data, path, settings, text_edits)
    fix_errors = [_map(d, joined) for d in outcome.diagnostics if d.code == "EMA903"]
    diagnostics = sorted([*remaining, *fix_errors], key=Diagnostic.sort_key)
    return SourceOutcome(diagnostics, fixed=new_data, applied=outcome.applied)


class NotebookSource:
    suffixes = (".ipynb",)

    def lint(
        self, data: bytes, path: str, settings: FileSettings, *, text_edits: bool = False
    ) -> SourceOutcome:
        return SourceOutcome(_lint(data, path, settings, text_edits))

    def fix(
        self, data: bytes, path: str, settings: FileSettings, *, text_edits: bool = False
    ) -> SourceOutcome:
        return _fix(data, path, settings, text_edits)

    def diff(self, path: str, old: bytes, new: bytes) -> str:
        """A unified diff of each changed cell's source, named ``path:cell N``."""
        try:
            before, after = read(old), read(new)
        except NotebookError:
            return ""
        old_cells = {c.number: c.text for c in before.cells}
        parts: list[str] = []
        for cell in after.cells:
            previous = old_cells.get(cell.number)
            if previous is None or previous == cell.text:
                continue
            name = f"{path}:cell {cell.number}"
            parts.extend(
                difflib.unified_diff(
                    _with_newline(previous), _with_newline(cell.text), fromfile=name, tofile=name
                )
            )
        return "".join(parts)


def _with_newline(text: str) -> list[str]:
    lines = text.splitlines(True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines


SOURCE = NotebookSource()
