"""The one traversal of a module: every node by type, its parent and its document order.

libcst's own visitor rebuilds every node while it walks, and its metadata providers each walk
the tree again; on real training libraries that multiplies the parse cost several times. This
walker reads the dataclass fields directly, skips whitespace and punctuation, and records what
the analysis layer and the rules query afterwards, so a file is walked exactly once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import libcst as cst

# Fields that hold only whitespace, comments or punctuation: nothing a rule reads as code.
_SKIPPED_PREFIXES = (
    "whitespace",
    "lpar",
    "rpar",
    "comma",
    "semicolon",
    "leading_lines",
    "lines_after_decorators",
    "header",
    "footer",
    "newline",
    "colon",
    "equal",
    "dot",
    "lbrace",
    "rbrace",
    "lbracket",
    "rbracket",
    "empty_lines",
    "arrow",
    "trailing_whitespace",
)

_FIELDS: dict[type, tuple[str, ...]] = {}
# type -> is it a libcst node? ``isinstance(x, cst.CSTNode)`` goes through ABCMeta's
# ``__instancecheck__`` and was the walk's largest single cost; a dict lookup is not.
_IS_NODE: dict[type, bool] = {}


def _child_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        all_names = [f.name for f in dataclasses.fields(cls)]
        names = tuple(n for n in all_names if not n.startswith(_SKIPPED_PREFIXES))
        # Decorators come first in the source, last in the dataclass.
        if "decorators" in names:
            names = ("decorators", *(n for n in names if n != "decorators"))
        _FIELDS[cls] = names
    return names


def _is_node(cls: type) -> bool:
    flag = _IS_NODE.get(cls)
    if flag is None:
        flag = _IS_NODE[cls] = issubclass(cls, cst.CSTNode)
    return flag


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """Direct children that are code (not whitespace or punctuation), in source order."""
    children: list[cst.CSTNode] = []
    is_node = _IS_NODE
    cls = type(node)
    names = _FIELDS.get(cls)
    if names is None:
        names = _child_fields(cls)
    for name in names:
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            for item in value:
                flag = is_node.get(type(item))
                if flag is None:
                    flag = _is_node(type(item))
                if flag:
                    children.append(item)
        else:
            flag = is_node.get(kind)
            if flag is None:
                flag = _is_node(kind)
            if flag:
                children.append(value)
    return children


class ModuleIndex:
    """Nodes of one module grouped by type, with parents and preorder numbers."""

    __slots__ = ("by_type", "module", "order", "parents")

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.by_type: dict[type, list[cst.CSTNode]] = {}
        self.parents: dict[int, cst.CSTNode] = {}
        self.order: dict[int, int] = {}
        self._walk(module)

    def _walk(self, root: cst.Module) -> None:
        # Preorder with an explicit stack (no recursion limit on deep expressions). The
        # child loop of ``_children`` is inlined: this runs for every node of every file.
        by_type = self.by_type
        parents = self.parents
        order = self.order
        fields = _FIELDS
        is_node = _IS_NODE
        stack: list[cst.CSTNode] = [root]
        pop = stack.pop
        push = stack.append
        n = 0
        while stack:
            node = pop()
            order[id(node)] = n
            n += 1
            cls = type(node)
            bucket = by_type.get(cls)
            if bucket is None:
                by_type[cls] = [node]
            else:
                bucket.append(node)
            names = fields.get(cls)
            if names is None:
                names = _child_fields(cls)
            children: list[cst.CSTNode] = []
            for name in names:
                value = getattr(node, name)
                kind = type(value)
                if kind is list or kind is tuple:
                    for item in value:
                        flag = is_node.get(type(item))
                        if flag is None:
                            flag = _is_node(type(item))
                        if flag:
                            children.append(item)
                else:
                    flag = is_node.get(kind)
                    if flag is None:
                        flag = _is_node(kind)
                    if flag:
                        children.append(value)
            if children:
                for child in reversed(children):
                    parents[id(child)] = node
                    push(child)

    # Queries -------------------------------------------------------------------------------
    def nodes(self, cls: type[cst.CSTNode]) -> list[cst.CSTNode]:
        """All nodes of exactly this type, in document order."""
        return self.by_type.get(cls, [])

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        parents = self.parents
        current = parents.get(id(node))
        while current is not None:
            yield current
            current = parents.get(id(current))

    def enclosing(self, node: cst.CSTNode, *types: type) -> cst.CSTNode | None:
        """The nearest ancestor of one of ``types``."""
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, types):
                return ancestor
        return None

    def statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement holding ``node`` (itself if it is one)."""
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return node
        return self.enclosing(node, cst.SimpleStatementLine, cst.BaseCompoundStatement)

    def is_before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """True if ``a`` starts before ``b`` in the source."""
        return self.order[id(a)] < self.order[id(b)]

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        if outer is inner:
            return True
        return any(a is outer for a in self.ancestors(inner))

    def descendants(self, node: cst.CSTNode, cls: type | tuple[type, ...]) -> Iterator[cst.CSTNode]:
        """Nodes of ``cls`` inside ``node``, in document order (walks the subtree only)."""
        stack = [node]
        while stack:
            current = stack.pop()
            if current is not node and isinstance(current, cls):
                yield current
            children = _children(current)
            if children:
                children.reverse()
                stack.extend(children)
