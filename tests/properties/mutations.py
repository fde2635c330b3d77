"""Mutations of source files, as hypothesis strategies, for the fixture-mutation properties.

Layout mutations (line endings, BOM, encoding cookie, tab indentation, inserted blank and
comment lines) keep the program: the same findings must come out, at mapped lines. Content
mutations (renamed identifiers, changed numbers) change it: only the invariants of
``invariants.check`` must still hold.
"""

from __future__ import annotations

import builtins
import keyword
import re

import libcst as cst
from hypothesis import strategies as st

from ema_lint.positions import PositionTable

BOM = b"\xef\xbb\xbf"


# Layout --------------------------------------------------------------------------------------
def with_newline(data: bytes, newline: bytes) -> bytes:
    return re.sub(rb"\r\n|\r|\n", newline, data)


def with_bom(data: bytes) -> bytes:
    return BOM + data


def with_cookie(data: bytes) -> tuple[bytes, int]:
    """The source re-encoded under a coding cookie on a new first line; (data, lines added)."""
    text = data.decode("utf-8")
    newline = re.search(r"\r\n|\r|\n", text)
    end = newline.group() if newline else "\n"
    try:
        return f"# -*- coding: latin-1 -*-{end}".encode() + text.encode("latin-1"), 1
    except UnicodeEncodeError:
        return f"# -*- coding: utf-8 -*-{end}".encode() + data, 1


class _Tabs(cst.CSTTransformer):
    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        return updated_node.with_changes(indent=None)


def with_tabs(data: bytes) -> bytes:
    """Every block indented with one tab per level (continuation lines keep their spaces)."""
    module = cst.parse_module(data)
    return module.visit(_Tabs()).with_changes(default_indent="\t").bytes


MARK = "#~ inserted by a mutation"


def statement_lines(data: bytes) -> dict[int, str]:
    """First line of every statement -> the indentation of that line."""
    module = cst.parse_module(data)
    statements: list[cst.CSTNode] = []
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            statements.append(node)
        stack.extend(node.children)
    table = PositionTable(module, statements)
    lines = table.lines
    found: dict[int, str] = {}
    for statement in statements:
        line = table.range(statement)[0].line
        text = lines.line_text(line)
        found[line] = text[: len(text) - len(text.lstrip(" \t"))]
    return found


def insert_lines(data: bytes, before: dict[int, list[str]]) -> bytes:
    """Insert lines (without their ending) before the given 1-based lines."""
    lines = re.findall(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", data)
    newline = re.search(rb"\r\n|\r|\n", data)
    end = newline.group() if newline else b"\n"
    out: list[bytes] = []
    for number, line in enumerate(lines, start=1):
        out.extend(text.encode() + end for text in before.get(number, []))
        out.append(line)
    return b"".join(out)


@st.composite
def inserted_lines(draw, data: bytes) -> tuple[bytes, dict[int, int]]:
    """Blank and comment lines inserted before statements; (data, old line -> new line)."""
    starts = statement_lines(data)
    chosen = draw(st.lists(st.sampled_from(sorted(starts)), max_size=6)) if starts else []
    before: dict[int, list[str]] = {}
    for line in chosen:
        kind = draw(st.sampled_from(["blank", "comment", "both"]))
        indent = starts[line]
        extra = {"blank": [""], "comment": [indent + MARK], "both": ["", indent + MARK]}[kind]
        before.setdefault(line, []).extend(extra)
    mapping: dict[int, int] = {}
    shift = 0
    total = data.count(b"\n") + data.count(b"\r") + 2
    for line in range(1, total + 1):
        shift += len(before.get(line, []))
        mapping[line] = line + shift
    return insert_lines(data, before), mapping


# Content -------------------------------------------------------------------------------------
_BUILTINS = frozenset(dir(builtins))


class _BoundNames(cst.CSTVisitor):
    """Names the module binds itself (not imported ones, not attributes)."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.imported: set[str] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.names.add(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.names.add(node.name.value)

    def visit_Param(self, node: cst.Param) -> None:
        self.names.add(node.name.value)

    def visit_For(self, node: cst.For) -> None:
        self._targets(node.target)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        name = node.evaluated_alias or node.evaluated_name
        self.imported.add(name.split(".")[0])

    def _targets(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name):
            self.names.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                self._targets(element.value)


class _Rename(cst.CSTTransformer):
    def __init__(self, mapping: dict[str, str]) -> None:
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.mapping.get(original_node.value)
        return updated_node.with_changes(value=new) if new else updated_node

    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.Attribute:
        # Only the object is a variable: ``.attr`` keeps its name.
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)


fresh_names = st.from_regex(r"[a-z][a-z0-9_]{2,9}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name not in _BUILTINS
)


@st.composite
def renamed(draw, data: bytes) -> bytes:
    """Some names the module binds itself renamed everywhere, consistently."""
    module = cst.parse_module(data)
    visitor = _BoundNames()
    module.visit(visitor)
    candidates = sorted(visitor.names - visitor.imported - _BUILTINS)
    if not candidates:
        return data
    chosen = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=5))
    taken = visitor.names | visitor.imported
    mapping: dict[str, str] = {}
    for name in chosen:
        new = draw(fresh_names.filter(lambda n: n not in taken))
        taken.add(new)
        mapping[name] = new
    return module.visit(_Rename(mapping)).bytes


NUMBERS = (
    "0",
    "1",
    "2",
    "0.0",
    "0.5",
    "0.9",
    "0.99",
    "0.995",
    "0.999",
    "0.9995",
    "0.9999",
    "0.99999",
    "1.0",
    "1.5",
    "1e-4",
    "2e-4",
    "0.0002",
    "1e-3",
    "5e-3",
    "10",
    "100",
    "1000",
    "1e9",
)


class _Numbers(cst.CSTTransformer):
    def __init__(self, choices: list[str]) -> None:
        super().__init__()
        self.choices = choices
        self.index = 0

    def _next(self) -> str | None:
        if self.index >= len(self.choices):
            return None
        self.index += 1
        return self.choices[self.index - 1]

    def leave_Float(self, original_node: cst.Float, updated_node: cst.Float) -> cst.BaseExpression:
        return self._number(updated_node)

    def leave_Integer(
        self, original_node: cst.Integer, updated_node: cst.Integer
    ) -> cst.BaseExpression:
        return self._number(updated_node)

    def _number(self, node: cst.BaseNumber) -> cst.BaseExpression:
        text = self._next()
        if not text:
            return node
        new = cst.parse_expression(text)
        return new.with_changes(lpar=node.lpar, rpar=node.rpar)


@st.composite
def renumbered(draw, data: bytes) -> bytes:
    """Numbers replaced, in document order, by decays, momenta, counts and odd values."""
    module = cst.parse_module(data)
    choices = draw(st.lists(st.sampled_from(("", *NUMBERS)), max_size=40))
    return module.visit(_Numbers(choices)).bytes
