"""One file in, findings (and fixed text) out.

The way through: pre-filter the bytes; parse once; walk once (the index); instantiate the
enabled rules and dispatch their visit methods over the indexed nodes; compute positions
only for what was reported; drop what ``# noqa`` silences. Fixing repeats lint + apply until
nothing more applies, re-parsing each result, and never lets a fix that breaks the file
through. Errors of ema-lint itself become EMA90x findings; the rest of the file, and of the
run, goes on.
"""

from __future__ import annotations

import ast
import re
import tokenize
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any

import libcst as cst

from . import dependencies, limits
from .analysis.objects.averaging import AveragingObjects
from .analysis.project.admission import project_admits
from .analysis.project.model import ProjectLink
from .analysis.project.model import parsed as parsed_for_summary
from .analysis.syntax.context import FileContext
from .analysis.syntax.index import ModuleIndex
from .analysis.syntax.parsing import parse_module
from .decoding import bom_encoding, bom_message, text_for_matching
from .diagnostics import Diagnostic, Fix, Position, Related, TextEdit
from .file_settings import FileSettings
from .fixer import apply_fixes, fix_span, keep_original_lines, text_edit
from .noqa import NoqaFilter, covering, file_is_suppressed
from .positions import LineIndex, PositionTable
from .prefilter import for_rules as prefilter_for
from .registry import by_code
from .rule import PendingReport, Rule

MAX_FIX_PASSES = 10


@dataclass(eq=False)
class Analysis:
    """The state of one lint of one text: kept so the fixer can act on the same nodes."""

    path: str
    data: bytes | str
    diagnostics: list[Diagnostic]
    module: cst.Module | None = None
    context: FileContext | None = None
    positions: PositionTable | None = None
    parsed: bool = False

    def release(self) -> None:
        """Drop the tree and the facts once the findings are taken (see
        ``FileContext.release``); the findings stay."""
        if self.context is not None:
            self.context.release()
        self.context = self.module = self.positions = None


@dataclass(eq=False)
class FixOutcome:
    """The result of fixing one text."""

    path: str
    original: bytes | str
    fixed: bytes | str
    diagnostics: list[Diagnostic]  # what is left after fixing, plus fix errors
    applied: int = 0

    @property
    def changed(self) -> bool:
        return self.fixed != self.original


def _internal(code: str, path: str, message: str, line: int = 1, column: int = 1) -> Diagnostic:
    rule = by_code()[code]
    position = Position(max(line, 1), max(column, 1))
    return Diagnostic(code, rule.name, message, path, position, position)


def _parse_error(path: str, data: bytes | str, error: BaseException) -> Diagnostic:
    bom = bom_encoding(data) if isinstance(data, bytes) else None
    if bom is not None:
        return _internal("EMA901", path, bom_message(bom))
    if isinstance(error, cst.ParserSyntaxError):
        # Python's own message is clearer ("'(' was never closed"); libcst's lists tokens.
        python = _python_syntax_error(data)
        if python is not None:
            message, line, column = python
            return _internal("EMA901", path, f"cannot parse: {message}", line, column)
        text = _one_line(error)
        found = re.search(r"error at (\d+):(\d+): (.*)", str(error.message))
        line, column = error.raw_line, error.raw_column + 1
        if found:
            line, column, text = int(found.group(1)), int(found.group(2)), found.group(3)
        elif str(error.message).startswith("tokenizer error"):
            # libcst's tokenizer names no position ("Syntax Error @ 1:1") for what CPython
            # accepts, mostly indentation that mixes tabs and spaces: say where it stops.
            return _tokenizer_error(path, data, str(error.message))
        if len(text) > 100:
            text = text[:97] + "..."
        return _internal("EMA901", path, f"cannot parse: {text}", line, column)
    if isinstance(error, RecursionError):
        return _internal("EMA901", path, "cannot parse: expressions nested too deeply")
    if isinstance(error, (UnicodeDecodeError, SyntaxError, LookupError)):
        decoding = _decoding_error(data)
        if decoding is not None:
            return decoding_error_diagnostic(path, *decoding)
        return _internal("EMA901", path, f"cannot decode: {_one_line(error)}")
    return _internal("EMA901", path, f"cannot parse: {type(error).__name__}: {_one_line(error)}")


def _tokenizer_error(path: str, data: bytes | str, message: str) -> Diagnostic:
    lines = source_lines(data).lines()
    low, high = 1, max(len(lines), 1)  # the first prefix of ``high`` lines that fails
    while low < high:
        middle = (low + high) // 2
        if _tokenizer_fails("".join(lines[:middle])):
            high = middle
        else:
            low = middle + 1
    line = lines[high - 1] if lines else ""
    indent = line[: len(line) - len(line.lstrip(" \t\f"))]
    why = message.removeprefix("tokenizer error: ")
    text = f"cannot parse: libcst's tokenizer stops here ({why}), although Python accepts it"
    if "\t" in indent and " " in indent:
        text += "; the indentation mixes tabs and spaces: indent with spaces only"
    return _internal("EMA901", path, text, high, 1)


def _tokenizer_fails(text: str) -> bool:
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        return str(error.message).startswith("tokenizer error")
    except Exception:
        return False
    return False


def _decoding_error(data: bytes | str) -> tuple[str, int, int, str] | None:
    """(encoding, line, column, reason) of the first undecodable byte, if any."""
    if not isinstance(data, bytes):
        return None
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
    except SyntaxError as error:
        if "unknown encoding" in str(error):
            return ("the declared encoding", 1, 1, _one_line(error))
        encoding = "utf-8"  # no usable cookie: Python reads the file as UTF-8
    try:
        data.decode(encoding)
    except UnicodeDecodeError as error:
        before = data[: error.start]
        line = before.count(b"\n") + 1
        column = error.start - (before.rfind(b"\n") + 1) + 1
        return (encoding, line, column, f"byte 0x{data[error.start]:02x} is not valid here")
    except LookupError:
        return (encoding, 1, 1, "unknown encoding")
    return None


def decoding_error_diagnostic(
    path: str, encoding: str, line: int, column: int, reason: str
) -> Diagnostic:
    return _internal("EMA901", path, f"cannot decode as {encoding}: {reason}", line, column)


def _python_syntax_error(data: bytes | str) -> tuple[str, int, int] | None:
    nul = data.find(b"\0" if isinstance(data, bytes) else "\0")
    if nul >= 0:
        # Python names no position for it; a NUL byte usually means a binary file.
        line, column = limits.position(data, nul)
        return ("the file contains a NUL byte (is it binary?)", line, column)
    try:
        compile(data, "<file>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        return (error.msg or "invalid syntax", error.lineno or 1, error.offset or 1)
    except (ValueError, RecursionError, MemoryError):
        return None
    return None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def _file_noqa(data: bytes | str) -> bool:
    if isinstance(data, bytes):
        if b"ema-lint" not in data:
            return False
        try:
            encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
            data = data.decode(encoding, "replace")
        except (SyntaxError, LookupError):
            data = data.decode("utf-8", "replace")
    return file_is_suppressed(data)


def analyze(
    data: bytes | str,
    path: str,
    settings: FileSettings,
    *,
    module: cst.Module | None = None,
    admitted: bool = False,
) -> Analysis:
    """Lint one text (bytes honour the encoding cookie and BOM).

    ``module`` is ``data`` already parsed (the fixer parses each fixed text to check it).
    ``admitted``: the caller has run the pre-filter and project admission on these bytes
    and they passed (a run's worker), so they are not run again.
    """
    rules = settings.visitor_rules()
    analysis = Analysis(path, data, [])
    if (
        settings.prefilter
        and not admitted
        and not prefilter_for(settings.filter_rules()).matches(text_for_matching(data))
        and not project_admits(path, data)
    ):
        return analysis
    if settings.noqa and _file_noqa(data):
        return analysis
    if module is None:
        refusal = limits.check(data)
        if refusal is not None:
            return _not_checked(analysis, settings, _refusal_error(path, data, refusal))
        try:
            module = parsed_for_summary(data) or parse_module(data)
        except Exception as error:
            return _not_checked(analysis, settings, _parse_error(path, data, error))
    analysis.module = module
    analysis.parsed = True
    try:
        ctx = FileContext(module, path, project=ProjectLink.for_context)
        analysis.context = ctx
        pending, crashes = _run_rules(ctx, rules, settings.options)
        diagnostics = [] if "EMA902" in settings.ignored else crashes
        if pending:
            diagnostics.extend(_place(ctx, pending, analysis, settings))
    except RecursionError as error:
        # Deeper than Python's recursion limit (code generation for positions, a tree walk):
        # nothing of the file can be reported reliably.
        analysis.module = analysis.context = analysis.positions = None
        return _not_checked(analysis, settings, _parse_error(path, data, error))
    diagnostics.sort(key=Diagnostic.sort_key)
    analysis.diagnostics = diagnostics
    used = getattr(ctx._project, "used", None)
    if used:
        dependencies.record(path, used)
    return analysis


def _not_checked(analysis: Analysis, settings: FileSettings, error: Diagnostic) -> Analysis:
    analysis.diagnostics = [] if "EMA901" in settings.ignored else [error]
    return analysis


def _refusal_error(path: str, data: bytes | str, refusal: limits.Refusal) -> Diagnostic:
    # Bytes that are not text at all get the clearer decoding message.
    decoding = _decoding_error(data)
    if decoding is not None:
        return decoding_error_diagnostic(path, *decoding)
    return _internal(
        "EMA901", path, f"cannot parse: {refusal.message}", refusal.line, refusal.column
    )


def _run_rules(
    ctx: FileContext,
    rules: Sequence[type[Rule]],
    options: Mapping[str, Mapping[str, Any]],
) -> tuple[list[PendingReport], list[Diagnostic]]:
    pending: list[PendingReport] = []
    crashes: list[Diagnostic] = []
    for rule_cls in rules:
        rule = rule_cls(ctx, options.get(rule_cls.name), options)
        try:
            for node_type, method_name in rule_cls.visited_types().items():
                nodes = ctx.nodes(node_type)
                if not nodes:
                    continue
                method = getattr(rule, method_name)
                for node in nodes:
                    method(node)
            rule.finish()
        except Exception as error:
            frame = traceback.extract_tb(error.__traceback__)[-1]
            where = f" at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}" if frame else ""
            crashes.append(
                _internal(
                    "EMA902",
                    ctx.path,
                    f"rule {rule_cls.code} ({rule_cls.name}) crashed on this file: "
                    f"{type(error).__name__}: {_one_line(error)}{where}; please report this bug",
                )
            )
        else:
            pending.extend(rule.reports)
        rule.reports = []  # each report names its rule: no cycle left to keep the tree alive
    return pending, crashes


def _place(
    ctx: FileContext,
    pending: Sequence[PendingReport],
    analysis: Analysis,
    settings: FileSettings,
) -> list[Diagnostic]:
    """Positions for the reported nodes, then noqa."""
    index = ctx.index
    wanted: list[cst.CSTNode] = []
    statements: dict[int, cst.CSTNode | None] = {}
    for report in pending:
        wanted.append(report.node)
        statement = index.statement(report.node)
        statements[id(report.node)] = statement
        if statement is not None:
            wanted.append(statement)
        if report.fix is not None:
            wanted.extend(e.target for e in report.fix.edits if e.target is not None)
        wanted.extend(node for node, _ in report.related)
    notes = _project_notes(ctx)
    positions = PositionTable(
        ctx.module, wanted, _source_text(analysis.data, ctx.module), ctx.index
    )
    analysis.positions = positions
    noqa = NoqaFilter(positions.lines) if settings.noqa else None
    result: list[Diagnostic] = []
    seen: dict[tuple[str, int, int, str], Diagnostic] = {}
    # Reports on suppression comments (EMA910) are judged last, once every other finding
    # has been matched against the comments: they stand only for tokens that silenced none.
    ordered = [r for r in pending if r.noqa_token is None]
    ordered += [r for r in pending if r.noqa_token is not None]
    for report in ordered:
        rule = report.rule
        start, end = positions.range(report.node)
        statement = statements[id(report.node)]
        statement_line = positions.range(statement)[0].line if statement is not None else None
        if report.noqa_token is not None:
            if noqa is None or not _unused(report.noqa_token, start.line, noqa, settings):
                continue
        elif noqa is not None and noqa.suppressed(rule.code, rule.name, start.line, statement_line):
            continue
        key = (rule.code, start.line, start.column, report.message)
        if key in seen:
            if report.related:  # one literal used by several calls: one finding, every use
                merged = seen[key]
                extra = tuple(
                    Related(ctx.path, positions.range(node)[0].line, note)
                    for node, note in report.related
                )
                merged.related = tuple(dict.fromkeys((*merged.related, *extra)))
            continue
        message, related = report.message, ()
        if notes and statement is not None:
            message, related = _cite(ctx, statement, report.message, notes)
        if report.related:
            here = tuple(
                Related(ctx.path, positions.range(node)[0].line, note)
                for node, note in report.related
            )
            related = here + tuple(related)
        diagnostic = Diagnostic(
            rule.code,
            rule.name,
            message,
            ctx.path,
            start,
            end,
            fix=report.fix,
            statement_line=statement_line,
            related=related,
        )
        seen[key] = diagnostic
        result.append(diagnostic)
    return result


def _project_notes(ctx: FileContext) -> list:
    """Evidence other files gave this module (only if the project was consulted)."""
    link = ctx._project
    notes = list(getattr(link, "notes", ()) or ())
    evidence = getattr(link, "evidence", None)
    objects = ctx._facts.get(AveragingObjects)
    if evidence and isinstance(objects, AveragingObjects):
        for obj in objects.objects:
            found = evidence.get(obj.spec.qualname) if obj.spec is not None else None
            if found is not None:
                notes.extend((name, found, None) for name in obj.names)
    return notes


def _cite(
    ctx: FileContext, statement: cst.CSTNode, message: str, notes: list
) -> tuple[str, tuple[Related, ...]]:
    """The message and related locations of a finding whose statement names an object
    another file told of (``ModelEMA, defined in utils/ema.py``)."""
    code = ctx.code(statement)
    cited: list[Related] = []
    for local, evidence, scope in notes:
        if scope is not None and not ctx.index.contains(scope, statement):
            continue
        if not re.search(rf"(?<![\w.]){re.escape(local)}\b", code):
            continue
        if any(r.message == evidence.what for r in cited):
            continue
        cited.append(Related(evidence.path, evidence.line, evidence.what))
    if not cited:
        return message, ()
    return f"{message} ({'; '.join(r.message for r in cited)})", tuple(cited)


def _unused(token: str, line: int, noqa: NoqaFilter, settings: FileSettings) -> bool:
    """Does ``token`` of the directive on ``line`` name a rule that runs on this file (an
    EMA code, a prefix of one, or a rule's name) and yet silence nothing there?"""
    upper = token.upper()
    if (line, upper) in noqa.used:
        return False
    for rule in settings.visitor_rules():
        if getattr(rule, "judges_suppressions", False):
            continue  # EMA910 itself: its reports are never silenced by the comment judged
        if covering(frozenset({upper}), rule.code, rule.name):
            return True
    return False


def lint(data: bytes | str, path: str, settings: FileSettings) -> list[Diagnostic]:
    """The findings of one text."""
    analysis = analyze(data, path, settings)
    analysis.release()
    return analysis.diagnostics


# Fixing ------------------------------------------------------------------------------------
def _encode(module: cst.Module, like: bytes | str) -> bytes | str:
    return module.bytes if isinstance(like, bytes) else module.code


def _parse_fixed(data: bytes | str | _Unrendered) -> cst.Module | None:
    """The fixed text parsed, or None if it does not parse (or no text could be made)."""
    if isinstance(data, _Unrendered):
        return None
    try:
        return parse_module(data)
    except Exception:
        return None


@dataclass(frozen=True)
class _Unrendered:
    """Why fixes could not be turned into text."""

    reason: str


_TOO_DEEP = _Unrendered("cannot be applied: the code around it is nested too deeply")
_NOT_REPRODUCED = _Unrendered(
    "cannot be applied: the parser does not reproduce this file line for line"
)


def _render(
    module: cst.Module,
    index: ModuleIndex,
    fixes: Sequence[Fix],
    data: bytes | str,
    before: bytes | str | None,
) -> bytes | str | _Unrendered:
    """``data`` with ``fixes`` applied, every line they do not change kept byte for byte."""
    if before is None:
        return _TOO_DEEP
    try:
        after = _encode(apply_fixes(module, index, fixes), data)
    except RecursionError:
        return _TOO_DEEP
    kept = keep_original_lines(data, before, after)
    return _NOT_REPRODUCED if kept is None else kept


def _choose(diagnostics: Sequence[Diagnostic], positions: PositionTable) -> list[Diagnostic]:
    """Fixable findings whose edits do not overlap, in source order."""
    chosen: list[Diagnostic] = []
    taken: list[tuple[int, int]] = []
    for diagnostic in diagnostics:
        assert diagnostic.fix is not None
        span = fix_span(diagnostic.fix, positions)
        if span is not None and any(span[0] <= e and s <= span[1] for s, e in taken):
            continue
        if span is not None:
            taken.append(span)
        chosen.append(diagnostic)
    return chosen


def _fix_key(diagnostic: Diagnostic) -> tuple[str, str, int]:
    return (diagnostic.code, diagnostic.message, diagnostic.line)


def fix(
    data: bytes | str,
    path: str,
    settings: FileSettings,
    *,
    passes: int = MAX_FIX_PASSES,
    admitted: bool = False,
) -> FixOutcome:
    """Apply every allowed fix, re-linting until nothing more applies (or ``passes`` rounds:
    one round shows what the findings of the file as it is fix, before any cascade).
    ``admitted`` as for :func:`analyze`, for the text as given."""
    original = data
    applied = 0
    rejected: set[tuple[str, str, int]] = set()
    errors: list[Diagnostic] = []
    analysis = analyze(data, path, settings, admitted=admitted)
    for _ in range(passes):
        if analysis.module is None or analysis.positions is None or analysis.context is None:
            break
        candidates = [
            d
            for d in analysis.diagnostics
            if d.fix is not None and settings.allows(d.fix) and _fix_key(d) not in rejected
        ]
        if not candidates:
            break
        chosen = _choose(candidates, analysis.positions)
        module, index = analysis.module, analysis.context.index
        try:
            before = _encode(module, data)
        except RecursionError:
            before = None
        new_data = _render(module, index, [d.fix for d in chosen], data, before)
        new_module = _parse_fixed(new_data)
        if new_module is None:
            good: list[Diagnostic] = []
            for diagnostic in chosen:
                alone = _render(module, index, [diagnostic.fix], data, before)
                if _parse_fixed(alone) is not None:
                    good.append(diagnostic)
                else:
                    rejected.add(_fix_key(diagnostic))
                    errors.append(_fix_error(diagnostic, alone))
            chosen = good[:1]
            if not chosen:
                continue
            new_data = _render(module, index, [d.fix for d in chosen], data, before)
            new_module = _parse_fixed(new_data)
            assert not isinstance(new_data, _Unrendered) and new_module is not None
        if new_data == data:
            # A fix that changes nothing would loop forever: stop offering it.
            rejected.update(_fix_key(d) for d in chosen)
            continue
        applied += len(chosen)
        data = new_data
        analysis = analyze(data, path, settings, module=new_module)
    if "EMA903" in settings.ignored:
        errors = []
    diagnostics = sorted([*analysis.diagnostics, *errors], key=Diagnostic.sort_key)
    return FixOutcome(path, original, data, diagnostics, applied)


def _fix_error(diagnostic: Diagnostic, rendered: bytes | str | _Unrendered) -> Diagnostic:
    rule = by_code()["EMA903"]
    problem = (
        rendered.reason
        if isinstance(rendered, _Unrendered)
        else "would leave the file unparseable and was not applied"
    )
    return Diagnostic(
        "EMA903",
        rule.name,
        f"the fix of {diagnostic.code} ({diagnostic.name}) {problem}; please report this bug",
        diagnostic.path,
        diagnostic.start,
        diagnostic.end,
    )


def attach_text_edits(analysis: Analysis) -> None:
    """Render each fix as a text replacement (for JSON and SARIF output)."""
    module = analysis.module
    if module is None or analysis.context is None or analysis.positions is None:
        return
    old_text = analysis.positions.text
    lines = analysis.positions.generated_lines
    for diagnostic in analysis.diagnostics:
        if diagnostic.fix is None:
            continue
        try:
            new_text = apply_fixes(module, analysis.context.index, [diagnostic.fix]).code
        except Exception:
            continue
        edit = text_edit(old_text, new_text, lines)
        if edit is not None:
            in_source = analysis.positions.in_source
            edit = TextEdit(in_source(edit.start), in_source(edit.end), edit.content)
        diagnostic.text_edits = () if edit is None else (edit,)


def _source_text(data: bytes | str, module: cst.Module) -> str | None:
    """The source as text, as libcst read it (its encoding, without a BOM)."""
    if isinstance(data, str):
        return data
    try:
        return data.decode(module.encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def source_lines(data: bytes | str) -> LineIndex:
    """Lines of a text for display (decoded with its declared encoding)."""
    if isinstance(data, bytes):
        try:
            encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
            text = data.decode(encoding, "replace")
        except (SyntaxError, LookupError):
            text = data.decode("utf-8", "replace")
        if text.startswith("\ufeff"):
            text = text[1:]
        return LineIndex(text)
    return LineIndex(data)
