"""What the mutation operators share on libcst trees: names, statements, edits and positions.

Written from the bug descriptions, independent of ema-lint's own analysis (the benchmark
must never measure a rule with the rule's own idea of what an update is).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

AVERAGED = frozenset(
    {"ema", "emas", "swa", "avg", "averaged", "average", "shadow", "teacher", "polyak"}
)
COEF_WORDS = ("decay", "beta", "alpha", "rate", "momentum", "tau", "polyak", "gamma", "factor")
UPDATE_METHODS = frozenset(
    {
        "update",
        "step",
        "update_parameters",
        "update_average",
        "update_moving_average",
        "update_ema",
        "ema_update",
        "ema_step",
    }
)
INPLACE = frozenset({"mul_", "add_", "sub_", "lerp_", "addcmul_", "div_", "copy_"})
_COMPONENT_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def components(name: str) -> list[str]:
    """Identifier components in lower case: ``ModelEmaV2`` -> model, ema, v, 2."""
    return [c.lower() for c in _COMPONENT_RE.findall(name)]


def is_averaged_name(name: str | None) -> bool:
    return bool(name) and any(c in AVERAGED for c in components(name))


def dotted(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for names and attributes; calls and subscripts keep their base."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    if isinstance(node, cst.Call):
        base = dotted(node.func)
        return f"{base}()" if base else None
    if isinstance(node, cst.Subscript):
        base = dotted(node.value)
        return f"{base}[]" if base else None
    return None


def last_name(node: cst.CSTNode | None) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return ""


def root_name(node: cst.CSTNode) -> cst.Name | None:
    """The Name at the root of an attribute / call / subscript chain."""
    while True:
        if isinstance(node, cst.Name):
            return node
        if isinstance(node, cst.Attribute):
            node = node.value
        elif isinstance(node, cst.Call):
            node = node.func
        elif isinstance(node, cst.Subscript):
            node = node.value
        else:
            return None


def code_of(module: cst.Module, node: cst.CSTNode) -> str:
    return module.code_for_node(node)


def number(node: cst.CSTNode) -> float | None:
    if isinstance(node, (cst.Float, cst.Integer)):
        try:
            return float(node.evaluated_value)
        except (ValueError, TypeError):
            return None
    return None


def expr_stmt_call(stmt: cst.CSTNode) -> cst.Call | None:
    """The call of a one-expression statement line (``x.f()``), else None."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            return small.value
    return None


def is_optimizer_step(stmt: cst.CSTNode) -> bool:
    """``optimizer.step()``, ``opt_g.step()``, ``scaler.step(opt)``, ``optimizer_step(...)``."""
    call = expr_stmt_call(stmt)
    if call is None:
        return False
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "step":
        comps = components(dotted(func.value) or "")
        if any("sched" in c or c == "lr" for c in comps):
            return False
        return any(c.startswith("optim") or c in ("opt", "scaler", "optimiser") for c in comps)
    return last_name(func) == "optimizer_step"


def _has_inplace(node: cst.CSTNode) -> bool:
    for sub in walk(node):
        if isinstance(sub, cst.AugAssign):
            return True
        if (
            isinstance(sub, cst.Call)
            and last_name(sub.func)
            in INPLACE
            | {
                "lerp",
                "_foreach_lerp_",
                "_foreach_mul_",
            }
            and isinstance(sub.func, cst.Attribute)
        ):
            return True
    return False


# Children of the nodes of the file being mutated, from its parent map: libcst's
# ``children`` property runs a visitor on every call, far too slow for repeated walks.
_KIDS: dict[int, list[cst.CSTNode]] = {}


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        kids = _KIDS.get(id(n))
        if kids is None:
            kids = list(n.children)
        stack.extend(reversed(kids))


def mentions_averaged(node: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Name) and is_averaged_name(n.value) for n in walk(node))


# Components that say a call steps a schedule or averages logged values, not weights:
# ``ema_sched.step()`` (a decay warmup), ``ema_update_dict(stats, {"loss": loss})``.
NOT_WEIGHTS = frozenset(
    {"sched", "scheduler", "warmup", "dict", "stats", "stat", "loss", "losses", "metric", "meter"}
)


def _not_weights(call: cst.Call) -> bool:
    names = [last_name(call.func), dotted(call.func) or ""]
    if any(set(components(n)) & NOT_WEIGHTS for n in names):
        return True
    return any(isinstance(a.value, cst.Dict) for a in call.args)


def is_update_call(call: cst.Call) -> bool:
    """A call updating an average: ``ema.update(m)``, ``update_ema()``, ``accumulate(g_ema, g)``."""
    func = call.func
    name = last_name(func)
    comps = components(name)
    if _not_weights(call):
        return False
    if (
        isinstance(func, cst.Attribute)
        and name in UPDATE_METHODS
        and is_averaged_name(dotted(func.value))
    ):
        return True
    wordy = {
        "ema",
        "swa",
        "average",
        "averaged",
        "moving",
        "polyak",
        "teacher",
        "target",
        "momentum",
        "shadow",
    }
    if set(comps) & wordy and set(comps) & {"update", "step", "accumulate"}:
        return True
    if name in ("accumulate", "soft_update", "polyak_update", "moving_average", "update_average"):
        return any(mentions_averaged(a.value) or "target" in code_text(a.value) for a in call.args)
    return False


def code_text(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def is_handwritten_update(stmt: cst.CSTNode) -> bool:
    """A loop (or block) that updates averaged tensors in place."""
    if isinstance(stmt, cst.For):
        return _has_inplace(stmt.body) and (
            mentions_averaged(stmt.iter) or mentions_averaged(stmt.target)
        )
    return False


def is_update_stmt(stmt: cst.CSTNode) -> bool:
    """A statement updating an average (a call, a hand-written loop, either under no_grad)."""
    call = expr_stmt_call(stmt)
    if call is not None:
        return is_update_call(call)
    if is_handwritten_update(stmt):
        return True
    if isinstance(stmt, cst.With) and isinstance(stmt.body, cst.IndentedBlock) and stmt.body.body:
        return all(is_update_stmt(s) for s in stmt.body.body)
    return False


def block_body(node: cst.CSTNode) -> tuple[cst.CSTNode, ...] | None:
    if isinstance(node, cst.Module):
        return tuple(node.body)
    if isinstance(node, cst.IndentedBlock):
        return tuple(node.body)
    return None


def with_body(block: cst.CSTNode, body: list[cst.CSTNode]) -> cst.CSTNode:
    if not body:
        body = [cst.SimpleStatementLine([cst.Pass()])]
    return block.with_changes(body=tuple(body))


def pass_line(like: cst.CSTNode | None = None) -> cst.SimpleStatementLine:
    """A ``pass`` in place of a removed statement: lines and blocks stay as they were."""
    leading = (
        like.leading_lines
        if isinstance(like, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        else ()
    )
    return cst.SimpleStatementLine([cst.Pass()], leading_lines=leading)


def suite_statements(body: cst.BaseSuite) -> list[cst.CSTNode]:
    if isinstance(body, cst.IndentedBlock):
        return list(body.body)
    return [cst.SimpleStatementLine(body=body.body)]


@dataclass
class Context:
    """One parsed file: module, parents, positions (of the original)."""

    module: cst.Module
    source: str
    parents: dict = field(default_factory=dict)
    positions: dict = field(default_factory=dict)
    _by_type: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)

    @classmethod
    def parse(cls, source: str) -> Context:
        module = cst.parse_module(source)
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        meta = wrapper.resolve_many([ParentNodeProvider, PositionProvider])
        parents, positions = meta[ParentNodeProvider], meta[PositionProvider]
        _KIDS.clear()
        for child, parent in parents.items():
            _KIDS.setdefault(id(parent), []).append(child)
        for kids in _KIDS.values():
            kids.sort(
                key=lambda n: (
                    (positions[n].start.line, positions[n].start.column)
                    if n in positions
                    else (0, 0)
                )
            )
        ctx = cls(module, source, parents, positions)
        for n in positions:
            ctx._by_type.setdefault(type(n), []).append(n)
        return ctx

    def offset(self, line: int, column: int) -> int:
        """A (1-based line, 0-based column) position as an index into the source."""
        if "line_starts" not in self.cache:
            # libcst counts lines at \n, \r\n and \r only (str.splitlines splits at more)
            starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", self.source)]
            self.cache["line_starts"] = starts
        return self.cache["line_starts"][line - 1] + column

    def line(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def nodes(self, kind: type) -> list:
        """Nodes of a type (and its subclasses), in document order."""
        key = ("nodes", kind)
        if key not in self.cache:
            found = [n for t, ns in self._by_type.items() if issubclass(t, kind) for n in ns]
            found.sort(key=lambda n: (self.positions[n].start.line, self.positions[n].start.column))
            self.cache[key] = found
        return self.cache[key]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement (line or compound) holding ``node``."""
        n = node
        while n is not None and not isinstance(
            n, (cst.SimpleStatementLine, cst.BaseCompoundStatement)
        ):
            n = self.parents.get(n)
        return n

    def block_of(self, stmt: cst.CSTNode) -> cst.CSTNode | None:
        p = self.parents.get(stmt)
        return p if isinstance(p, (cst.Module, cst.IndentedBlock)) else None

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def enclosing_for_targets(self, node: cst.CSTNode) -> list[tuple[cst.For, set[str]]]:
        out = []
        for a in self.ancestors(node):
            if isinstance(a, cst.For):
                out.append((a, {n.value for n in walk(a.target) if isinstance(n, cst.Name)}))
        return out

    def blocks(self) -> Iterator[tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]]:
        yield self.module, tuple(self.module.body)
        for n in self.nodes(cst.IndentedBlock):
            yield n, tuple(n.body)


class _Replace(cst.CSTTransformer):
    def __init__(self, repl: dict[int, object]) -> None:
        self.repl = repl

    def on_leave(self, original, updated):
        return self.repl.get(id(original), updated)


@dataclass
class Edit:
    """Node replacements (by identity) and the nodes of the result whose lines are expected."""

    replace: dict[int, object] = field(default_factory=dict)
    originals: dict[int, cst.CSTNode] = field(default_factory=dict)
    markers: list[cst.CSTNode] = field(default_factory=list)
    lines: set[int] = field(default_factory=set)

    def put(self, old: cst.CSTNode, new: object) -> None:
        self.replace[id(old)] = new
        self.originals[id(old)] = old

    def mark(self, node: cst.CSTNode) -> None:
        self.markers.append(node)

    def mark_unchanged(self, node: cst.CSTNode) -> None:
        """Expect a line of a node this edit leaves alone (a fresh copy keeps its identity)."""
        if id(node) in self.replace:
            new = self.replace[id(node)]
            if isinstance(new, cst.CSTNode):
                self.markers.append(new)
            return
        copy = node.with_changes()
        self.replace[id(node)] = copy
        self.markers.append(copy)


def _splice(ctx: Context, edit: Edit) -> str | None:
    """The mutant's text by replacing source spans: expression-level edits move no line, so
    the original positions hold and no tree needs rebuilding (the slow part of a run)."""
    if edit.markers:
        return None
    spans = []
    for key, new in edit.replace.items():
        old = edit.originals.get(key)
        if old is None or not isinstance(new, cst.CSTNode) or old not in ctx.positions:
            return None
        if isinstance(old, cst.SimpleStatementLine) and isinstance(new, cst.SimpleStatementLine):
            first, last = old.body[0], old.body[-1]
            text = "; ".join(code_text(b).rstrip("; ") for b in new.body)
        elif isinstance(old, (cst.BaseExpression, cst.BaseSmallStatement)):
            first = last = old
            text = code_text(new)
            if isinstance(old, cst.BaseSmallStatement):
                text = text.rstrip().rstrip(";")
        else:
            return None
        start, end = ctx.positions[first].start, ctx.positions[last].end
        a, b = ctx.offset(start.line, start.column), ctx.offset(end.line, end.column)
        src = ctx.source
        for _ in getattr(old, "lpar", ()) if first is old else ():
            # positions leave an expression's own parentheses out; its replacement has them
            while a > 0 and src[a - 1] in " \t":
                a -= 1
            while b < len(src) and src[b] in " \t":
                b += 1
            if a == 0 or src[a - 1] != "(" or b >= len(src) or src[b] != ")":
                return None
            a, b = a - 1, b + 1
        spans.append((a, b, text))
    spans.sort()
    for a, b in itertools.pairwise(spans):
        if a[1] > b[0]:
            return None
    out = ctx.source
    for a, b, text in reversed(spans):
        out = out[:a] + text + out[b:]
    return out


def apply(ctx: Context, edit: Edit, splice: bool = True) -> tuple[str, list[int]]:
    """The mutant's code and the lines of its markers (plus the edit's fixed lines)."""
    spliced = _splice(ctx, edit) if splice else None
    if spliced is not None:
        return spliced, sorted(edit.lines)
    module = ctx.module
    new = module.visit(_Replace(edit.replace))
    if id(module) in edit.replace:
        new = edit.replace[id(module)]
    lines = set(edit.lines)
    if edit.markers:
        positions = MetadataWrapper(new, unsafe_skip_copy=True).resolve(PositionProvider)
        for m in edit.markers:
            if m in positions:
                lines.add(positions[m].start.line)
    return new.code, sorted(lines)
