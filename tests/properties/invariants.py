"""What must hold for ANY source ema-lint is given, checked in one place.

Used by the property tests (generated and mutated programs) and the generated training
loops. For one source, :func:`check` asserts:

- linting never raises, and no rule crashes (EMA902) or breaks the file (EMA903);
- a file with no applicable fix comes back byte for byte identical from ``fix``;
- the fixed file parses, and fixing it again changes nothing (idempotence);
- every fix, applied alone, changes only the lines its rule's ``fix_scope`` allows
  (``ema_lint.diagnostics.FixScope``), and the whole fix only the union of those;
- the BOM, the encoding cookie and the line endings survive fixing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

from ema_lint import engine, registry
from ema_lint.config import Settings
from ema_lint.diagnostics import Diagnostic, EditKind, FixScope
from ema_lint.fixer import apply_fixes, keep_original_lines
from ema_lint.positions import LineIndex, PositionTable

BOM = b"\xef\xbb\xbf"
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_TERMINATOR = re.compile(rb"\r\n|\r|\n")
_INTERNAL = ("EMA902", "EMA903")


def file_settings(*, unsafe: bool, prefilter: bool = True) -> engine.FileSettings:
    """The default rules and options, as for a file with no configuration."""
    base = Settings().for_file(None)
    return engine.FileSettings(
        rules=base.rules,
        options=base.options,
        noqa=True,
        unsafe_fixes=unsafe,
        prefilter=prefilter,
        ignored=base.ignored,
    )


@dataclass
class Checked:
    """What :func:`check` saw, for statistics and for further assertions."""

    diagnostics: list[Diagnostic]  # the findings in the source
    fixed: bytes
    applied: int
    fixable: list[Diagnostic] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)  # the findings left after --fix


def check(data: bytes, settings: engine.FileSettings, path: str = "t.py") -> Checked:
    analysis = engine.analyze(data, path, settings)
    found = analysis.diagnostics
    internal = [(d.code, d.line, d.message) for d in found if d.code in _INTERNAL]
    assert not internal, internal
    fixable = [d for d in found if d.fix is not None and settings.allows(d.fix)]
    allowed_by_fix = _check_each_fix(data, analysis, fixable)

    outcome = engine.fix(data, path, settings)
    internal = [(d.code, d.line, d.message) for d in outcome.diagnostics if d.code in _INTERNAL]
    assert not internal, internal
    fixed = outcome.fixed
    assert isinstance(fixed, bytes)
    if not fixable:
        assert fixed == data, "a file with nothing to fix must come back byte for byte"
        assert outcome.applied == 0
        return Checked(found, fixed, 0, fixable, found)
    remaining = outcome.diagnostics
    if fixed != data:
        cst.parse_module(fixed)  # raises if the fix broke the file
        again = engine.fix(fixed, path, settings)
        assert again.fixed == fixed, "fixing is not idempotent"
        remaining = again.diagnostics
        _assert_each_pass_within(data, fixed, path, settings, allowed_by_fix)
        _assert_envelope(data, fixed)
    return Checked(found, fixed, outcome.applied, fixable, remaining)


def _assert_each_pass_within(
    data: bytes,
    fixed: bytes,
    path: str,
    settings: engine.FileSettings,
    allowed_by_fix: list[set[int]],
) -> None:
    """The fixes of each pass change only the lines they may. A fix can bring up a new
    finding (an update made in place now runs outside ``no_grad``); its fix is held to the
    lines of the file as that pass saw it."""
    allowed = set().union(*allowed_by_fix)
    changed, inserted = changed_lines(data, fixed)
    if changed <= allowed and all(i in allowed or i + 1 in allowed for i in inserted):
        return  # within the first pass's lines: no need to replay the passes
    current = data
    for _ in range(engine.MAX_FIX_PASSES):
        following = engine.fix(current, path, settings, passes=1).fixed
        assert isinstance(following, bytes)
        if following == current:
            break
        together = set().union(*allowed_by_fix)
        _assert_within(current, following, together, "the fixes together", moves=True)
        current = following
        analysis = engine.analyze(current, path, settings)
        fixable = [d for d in analysis.diagnostics if d.fix and settings.allows(d.fix)]
        allowed_by_fix = _check_each_fix(current, analysis, fixable)
    assert current == fixed, "the fixes applied pass by pass differ from --fix"


# One fix at a time --------------------------------------------------------------------------
def _check_each_fix(
    data: bytes, analysis: engine.Analysis, fixable: list[Diagnostic]
) -> list[set[int]]:
    if not fixable:
        return []
    module, ctx = analysis.module, analysis.context
    assert module is not None and ctx is not None
    index = ctx.index
    statements = [
        node
        for cls, nodes in index.by_type.items()
        if issubclass(cls, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        for node in nodes
    ]
    targets = [e.target for d in fixable for e in d.fix.edits if e.target is not None]  # type: ignore[union-attr]
    target_statements = [index.statement(t) for t in targets]
    table = PositionTable(
        module, [*statements, *targets, *(s for s in target_statements if s is not None)]
    )
    lines = table.lines
    before = module.bytes
    header = _import_block_lines(module, table)
    engine.attach_text_edits(analysis)  # the fixes as JSON and SARIF output show them
    original_text = engine.source_lines(data).text
    allowed_by_fix = []
    for diagnostic in fixable:
        rule = registry.by_code()[diagnostic.code]
        fix = diagnostic.fix
        assert fix is not None
        home = _holding_statement(diagnostic, statements, table, lines)
        assert home is not None, f"{diagnostic.code} at {diagnostic.line}: no statement"
        allowed = _span(table, home)
        for edit in fix.edits:
            if edit.kind is EditKind.ADD_IMPORT:
                assert rule.fix_scope is FixScope.MOVES, f"{rule.code} adds an import"
                allowed |= header
                continue
            target = edit.target
            assert target is not None
            holder = index.statement(target)
            if rule.fix_scope is FixScope.STATEMENT:
                assert holder is not None and index.contains(home, target), (
                    f"{rule.code}'s fix edits outside the statement of its finding "
                    f"(line {diagnostic.line}); declare a wider fix_scope"
                )
            elif rule.fix_scope is FixScope.VALUE:
                assert edit.kind is EditKind.REPLACE and isinstance(target, cst.BaseExpression), (
                    f"{rule.code} (fix_scope VALUE) may only replace expressions"
                )
                if holder is not None:
                    allowed |= _span(table, holder)
            else:
                node = holder if holder is not None else target
                allowed |= _span(table, node) | _comments_above(table, node)
        after = apply_fixes(module, index, [fix]).bytes
        alone = keep_original_lines(data, before, after)
        assert alone is not None, f"{diagnostic.code}: lines could not be kept"
        try:
            cst.parse_module(alone)
        except cst.ParserSyntaxError as error:  # pragma: no cover - the failure message
            raise AssertionError(f"{diagnostic.code}'s fix alone does not parse") from error
        what = f"{diagnostic.code}'s fix (line {diagnostic.line})"
        _assert_within(data, alone, allowed, what, rule.fix_scope is FixScope.MOVES)
        _assert_text_edits(original_text, diagnostic, engine.source_lines(alone).text)
        allowed_by_fix.append(allowed)
    return allowed_by_fix


def _assert_text_edits(original: str, diagnostic: Diagnostic, fixed: str) -> None:
    """Applying the fix's text edits to the original gives the fixed text (editors and
    machine-readable output rely on them)."""
    edits = diagnostic.text_edits
    assert edits is not None, f"{diagnostic.code}: no text edits"
    lines = LineIndex(original)
    text = original
    for edit in sorted(edits, key=lambda e: (e.start.line, e.start.column), reverse=True):
        start = lines.starts[edit.start.line - 1] + edit.start.column - 1
        end = lines.starts[edit.end.line - 1] + edit.end.column - 1
        text = text[:start] + edit.content + text[end:]
    assert text == fixed, f"{diagnostic.code}'s text edits do not reproduce its fix"


def _holding_statement(
    diagnostic: Diagnostic,
    statements: Iterable[cst.CSTNode],
    table: PositionTable,
    lines: LineIndex,
) -> cst.CSTNode | None:
    start = lines.starts[diagnostic.start.line - 1] + diagnostic.start.column - 1
    end = lines.starts[diagnostic.end.line - 1] + diagnostic.end.column - 1
    best = None
    for node in statements:
        if node not in table:
            continue
        s, e = table.offsets(node)
        if s <= start and end <= e and (best is None or e - s < best[1] - best[0]):
            best = (s, e, node)
    if best is None:
        # A finding on a trailing comment (EMA910) lies past its statement's code: the
        # statement it belongs to is the innermost one whose last line holds the comment.
        for node in statements:
            if node not in table:
                continue
            first, last = table.range(node)
            if first.line <= diagnostic.start.line == last.line == diagnostic.end.line:
                s, e = table.offsets(node)
                if best is None or e - s < best[1] - best[0]:
                    best = (s, e, node)
    return None if best is None else best[2]


def _span(table: PositionTable, node: cst.CSTNode) -> set[int]:
    start, end = table.range(node)
    return set(range(start.line, end.line + 1))


def _comments_above(table: PositionTable, node: cst.CSTNode) -> set[int]:
    """The lines of the comments and blank lines that belong to a statement, above it."""
    leading = getattr(node, "leading_lines", ())
    start, _ = table.range(node)
    return set(range(start.line - len(leading), start.line))


def _import_block_lines(module: cst.Module, table: PositionTable) -> set[int]:
    """The module's leading docstring and imports, and the line after them."""
    lines: set[int] = {1}
    for statement in module.body:
        small = statement.body if isinstance(statement, cst.SimpleStatementLine) else ()
        if not small or not all(
            isinstance(s, (cst.Import, cst.ImportFrom, cst.Expr)) for s in small
        ):
            break
        if statement in table:
            lines |= _span(table, statement)
    return lines | {max(lines) + 1}


# Comparing texts ----------------------------------------------------------------------------
def _lines(data: bytes) -> list[bytes]:
    return re.findall(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", data)


def changed_lines(old: bytes, new: bytes) -> tuple[set[int], set[int]]:
    """(1-based old lines replaced or deleted, old line numbers after which lines were added)."""
    changed: set[int] = set()
    inserted: set[int] = set()
    matcher = difflib.SequenceMatcher(None, _lines(old), _lines(new), autojunk=False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            changed.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            inserted.add(i1)
    return changed, inserted


def _assert_within(
    old: bytes, new: bytes, allowed: set[int], what: str, moves: bool = False
) -> None:
    """Only the ``allowed`` lines of ``old`` change. A fix that ``moves`` code is a deletion
    here and an insertion there, which a line diff may align as the lines in between moving
    instead: for it, every other line must be kept byte for byte and in order."""
    if moves:
        kept = [line for i, line in enumerate(_lines(old), start=1) if i not in allowed]
        rest = iter(_lines(new))
        lost = next((line for line in kept if not any(line == n for n in rest)), None)
        assert lost is None, f"{what} lost or changed {lost!r}, allowed {sorted(allowed)}"
        return
    changed, inserted = changed_lines(old, new)
    outside = sorted(changed - allowed)
    assert not outside, f"{what} changed lines {outside}, allowed {sorted(allowed)}"
    stray = sorted(i for i in inserted if i not in allowed and i + 1 not in allowed)
    assert not stray, f"{what} inserted lines after {stray}, allowed {sorted(allowed)}"


def _assert_envelope(old: bytes, new: bytes) -> None:
    assert old.startswith(BOM) == new.startswith(BOM), "the BOM was not kept"
    for number in (0, 1):
        old_line, new_line = _line(old, number), _line(new, number)
        if _COOKIE.match(old_line):
            assert new_line == old_line, "the encoding cookie was not kept"
    endings = set(_TERMINATOR.findall(old))
    new_endings = set(_TERMINATOR.findall(new))
    assert new_endings <= endings or not endings, (
        f"line endings {sorted(new_endings - endings)} appeared"
    )


def _line(data: bytes, number: int) -> bytes:
    lines = _lines(data)
    return lines[number] if number < len(lines) else b""
