"""Applying fixes: libcst node edits turned into a new module in one transform.

Edits are anchored on node identity, so a fix built by a rule from the nodes it visited
lands exactly there. Only the path from the root to the edited nodes is rebuilt; everything
else (comments, blank lines, quotes, line endings) is carried over untouched.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

import libcst as cst

from .analysis.syntax.index import ModuleIndex
from .diagnostics import Edit, EditKind, Fix, Position, TextEdit
from .positions import LineIndex, PositionTable


class _Applier(cst.CSTTransformer):
    def __init__(self, edits: Sequence[Edit], index: ModuleIndex) -> None:
        super().__init__()
        self.replace: dict[int, object] = {}
        self.before: dict[int, list[cst.BaseStatement]] = {}
        self.after: dict[int, list[cst.BaseStatement]] = {}
        self.remove: set[int] = set()
        self.on_path: set[int] = set()
        for edit in edits:
            if edit.target is None:
                continue
            key = id(edit.target)
            if edit.kind is EditKind.REPLACE:
                self.replace[key] = edit.replacement
            elif edit.kind is EditKind.REMOVE:
                self.remove.add(key)
            elif edit.kind is EditKind.INSERT_BEFORE:
                self.before.setdefault(key, []).extend(edit.statements)
            elif edit.kind is EditKind.INSERT_AFTER:
                self.after.setdefault(key, []).extend(edit.statements)
            self.on_path.add(key)
            self.on_path.update(id(a) for a in index.ancestors(edit.target))
        # Comments above a removed statement are about the code, not about that statement
        # alone: they move to the next statement kept in the block (or to its footer).
        self.carry: dict[int, list[cst.EmptyLine]] = {}
        self.footer: dict[int, list[cst.EmptyLine]] = {}
        for edit in edits:
            if edit.kind is EditKind.REMOVE and edit.target is not None and not edit.moved:
                self._carry_comments(edit.target, index)

    def _carry_comments(self, statement: cst.CSTNode, index: ModuleIndex) -> None:
        lines = list(getattr(statement, "leading_lines", ()))
        if not any(line.comment is not None for line in lines):
            return
        parent = index.parent(statement)
        body = getattr(parent, "body", None)
        if parent is None or not isinstance(body, (list, tuple)):
            return
        following = False
        for sibling in body:
            if sibling is statement:
                following = True
            elif following and id(sibling) not in self.remove:
                self.carry.setdefault(id(sibling), []).extend(lines)
                self.on_path.add(id(sibling))
                return
        self.footer.setdefault(id(parent), []).extend(lines)

    def on_visit(self, node: cst.CSTNode) -> bool:
        key = id(node)
        # Descend only towards edited nodes, and never into a node that is replaced whole.
        return key in self.on_path and key not in self.replace and key not in self.remove

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        key = id(original_node)
        if key not in self.on_path:
            return updated_node
        if key in self.remove:
            return cst.RemovalSentinel.REMOVE
        result = self.replace.get(key, updated_node)
        carried = self.carry.get(key)
        if carried and isinstance(result, cst.CSTNode) and hasattr(result, "leading_lines"):
            result = result.with_changes(leading_lines=[*carried, *result.leading_lines])
        footer = self.footer.get(key)
        if footer and isinstance(result, (cst.IndentedBlock, cst.Module)):
            result = result.with_changes(footer=[*footer, *result.footer])
        if isinstance(result, cst.IndentedBlock) and not result.body:
            result = result.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
        before = self.before.get(key)
        after = self.after.get(key)
        if before or after:
            return cst.FlattenSentinel([*(before or ()), result, *(after or ())])
        return result


def _has_import(module: cst.Module, edit: Edit) -> bool:
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if edit.name is None and isinstance(small, cst.Import):
                for alias in small.names:
                    if alias.asname is None and _dotted(alias.name) == edit.module:
                        return True
            if edit.name is not None and isinstance(small, cst.ImportFrom):
                if small.relative or _dotted(small.module) != edit.module:
                    continue
                if isinstance(small.names, cst.ImportStar):
                    return True
                for alias in small.names:
                    if alias.asname is None and _dotted(alias.name) == edit.name:
                        return True
    return False


def _dotted(node: cst.BaseExpression | None) -> str | None:
    from .analysis.syntax.names import dotted_name

    return None if node is None else dotted_name(node)


def _is_import_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, (cst.Import, cst.ImportFrom)) for small in statement.body
    )


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _add_imports(module: cst.Module, edits: Iterable[Edit]) -> cst.Module:
    wanted: list[Edit] = []
    seen: set[tuple[str, str | None]] = set()
    for edit in edits:
        key = (edit.module, edit.name)
        if key in seen or _has_import(module, edit):
            continue
        seen.add(key)
        wanted.append(edit)
    if not wanted:
        return module
    new_lines = [
        cst.parse_statement(
            f"import {e.module}" if e.name is None else f"from {e.module} import {e.name}",
            config=module.config_for_parsing,
        )
        for e in wanted
    ]
    body = list(module.body)
    position = 0
    if body and _is_docstring(body[0]):
        position = 1
    # After the first block of imports (the module's header), else at the top.
    index = position
    while index < len(body) and _is_import_line(body[index]):
        index += 1
    # No import block at the top: keep a blank line between the imports and the code.
    if index == position and body[position:] and not body[position].leading_lines:
        body[position] = body[position].with_changes(leading_lines=[cst.EmptyLine()])
    body[index:index] = new_lines
    return module.with_changes(body=body)


def apply_fixes(module: cst.Module, index: ModuleIndex, fixes: Sequence[Fix]) -> cst.Module:
    """The module with every edit of ``fixes`` applied (callers ensure they do not overlap)."""
    edits = [edit for fix in fixes for edit in fix.edits]
    tree_edits = [e for e in edits if e.kind is not EditKind.ADD_IMPORT]
    result = module
    if tree_edits:
        result = module.visit(_Applier(tree_edits, index))
    imports = [e for e in edits if e.kind is EditKind.ADD_IMPORT]
    if imports:
        result = _add_imports(result, imports)
    return result


def fix_span(fix: Fix, positions: PositionTable) -> tuple[int, int] | None:
    """Offsets covered by a fix's edits (None when it only adds imports)."""
    starts: list[int] = []
    ends: list[int] = []
    for edit in fix.edits:
        if edit.target is None:
            continue
        start, end = positions.offsets(edit.target)
        starts.append(start)
        ends.append(end)
    if not starts:
        return None
    return min(starts), max(ends)


def text_edit(old_text: str, new_text: str, lines: LineIndex | None = None) -> TextEdit | None:
    """The smallest single text replacement turning ``old_text`` into ``new_text``."""
    if old_text == new_text:
        return None
    prefix = 0
    limit = min(len(old_text), len(new_text))
    while prefix < limit and old_text[prefix] == new_text[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < limit - prefix
        and old_text[len(old_text) - 1 - suffix] == new_text[len(new_text) - 1 - suffix]
    ):
        suffix += 1
    lines = lines or LineIndex(old_text)
    start: Position = lines.position(prefix)
    end: Position = lines.position(len(old_text) - suffix)
    return TextEdit(start, end, new_text[prefix : len(new_text) - suffix])


_LINES = {
    str: re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$"),
    bytes: re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$"),
}


def _lines(text: bytes | str) -> list:
    """Lines with their endings; only CR, LF and CRLF end a line (as in Python's tokenizer)."""
    return _LINES[type(text)].findall(text)


def keep_original_lines(original: bytes | str, before: bytes | str, after: bytes | str):
    """``after`` with every line the fixes did not change taken from ``original``.

    ``before`` is the code libcst generates for the parsed, unfixed module and ``after`` for
    the fixed one. libcst does not reproduce every file byte for byte: it drops a form feed
    before a statement and a lone carriage return ending the file. Writing ``after`` as is
    would change those lines too, far from any finding, so the lines that ``before`` and
    ``after`` share are copied from the original instead, and a changed line keeps what
    libcst dropped at its start. Returns None when the lines of
    ``original`` and ``before`` cannot be matched one to one (then nothing is written).
    """
    if before == original:
        return after
    tail = original[:0]
    body = original
    cr = "\r" if isinstance(original, str) else b"\r"
    if original.endswith(cr):
        # libcst drops a lone CR that ends the file; it is put back after fixing.
        body, tail = original[:-1], original[-1:]
    old, generated, new = _lines(body), _lines(before), _lines(after)
    if len(old) != len(generated):
        return None
    pieces = []
    matcher = difflib.SequenceMatcher(None, generated, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pieces.extend(old[i1:i2])
        elif tag == "replace" and i2 - i1 == j2 - j1:
            # A line the fix changed keeps what libcst dropped at its start (a form feed).
            for mine, theirs, fixed in zip(generated[i1:i2], old[i1:i2], new[j1:j2], strict=True):
                kept = theirs[: len(theirs) - len(mine)] if theirs.endswith(mine) else theirs[:0]
                pieces.append(kept + fixed)
        else:
            pieces.extend(new[j1:j2])
    joined = original[:0].join(pieces)
    if tail and joined.endswith(cr):
        return joined  # the fix ended the file with its own line ending
    return joined + tail
