"""The one traversal of a module: every node by type, its parent and its document order.

libcst's own visitor rebuilds every node while it walks, and its metadata providers each walk
the tree again; on real training libraries that multiplies the parse cost several times. This
walker reads the dataclass fields directly, skips whitespace and punctuation, and records what
the analysis layer and the rules query afterwards, so a file is walked exactly once.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
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


# (node type, queried types) -> isinstance(node, queried types), without ABCMeta per node.
_MATCHES: dict[tuple[type, type | tuple[type, ...]], bool] = {}


def _matches(cls: type, types: type | tuple[type, ...]) -> bool:
    key = (cls, types)
    flag = _MATCHES.get(key)
    if flag is None:
        flag = _MATCHES[key] = issubclass(cls, types)
    return flag


class ModuleIndex:
    """Nodes of one module grouped by type, with parents and preorder numbers.

    Everything a module-wide question needs is answered from here, built once per module:
    subtree membership from preorder intervals (``contains``, ``descendants`` without a
    walk), and tables grouped by name (calls, functions, classes, keyword arguments,
    attribute targets) built on first use. Asking per object or per class is then a lookup,
    and the analysis stays linear in the size of the module.
    """

    __slots__ = (
        "_attribute_targets",
        "_calls_by_attr",
        "_calls_by_name",
        "_classes",
        "_ends",
        "_functions",
        "_keywords",
        "_matching_types",
        "_positions",
        "_rooted",
        "_type_orders",
        "_up",
        "by_type",
        "module",
        "order",
        "parents",
        "preorder",
    )

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.by_type: dict[type, list[cst.CSTNode]] = {}
        self.parents: dict[int, cst.CSTNode] = {}
        self.order: dict[int, int] = {}
        self.preorder: list[cst.CSTNode] = []
        self._ends: list[int] | None = None
        self._up: list[int] = []  # preorder number -> its parent's (-1 for the module)
        self._type_orders: dict[type, list[int]] = {}
        self._matching_types: dict[type | tuple[type, ...], list[type]] = {}
        self._positions: dict[int, int] = {}  # statement id -> where it sits in its block
        self._calls_by_name: dict[str, list[cst.Call]] | None = None
        self._calls_by_attr: dict[str, list[cst.Call]] | None = None
        self._functions: dict[str, list[cst.FunctionDef]] | None = None
        self._classes: dict[str, list[cst.ClassDef]] | None = None
        self._keywords: dict[str, list[cst.Arg]] | None = None
        self._rooted: dict[str, tuple[list[cst.Name], list[cst.Attribute]]] | None = None
        self._attribute_targets: list[tuple[cst.Attribute, cst.BaseExpression | None]] | None = None
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
        # The parents' preorder numbers, in a stack beside the nodes': list operations
        # here make ``_subtree_ends`` a pass over lists instead of two lookups per node.
        above: list[int] = [-1]
        pop_above = above.pop
        push_above = above.append
        record = self.preorder.append
        record_up = self._up.append
        n = 0
        while stack:
            node = pop()
            record_up(pop_above())
            order[id(node)] = n
            record(node)
            mine = n
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
                    push_above(mine)

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
        parents = self.parents
        matches = _MATCHES
        current = parents.get(id(node))
        while current is not None:
            flag = matches.get((type(current), types))
            if flag is None:
                flag = _matches(type(current), types)
            if flag:
                return current
            current = parents.get(id(current))
        return None

    def statement(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The statement holding ``node`` (itself if it is one)."""
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            return node
        return self.enclosing(node, cst.SimpleStatementLine, cst.BaseCompoundStatement)

    def body_position(self, statement: cst.CSTNode) -> int | None:
        """Where ``statement`` sits in the ``body`` of its parent block (None: not in one),
        from a table built once per block instead of a search of the block per question."""
        positions = self._positions
        found = positions.get(id(statement))
        if found is not None:
            return found
        block = self.parents.get(id(statement))
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)):
            return None
        for i, child in enumerate(body):
            positions.setdefault(id(child), i)
        found = positions.get(id(statement))
        return found if found is not None and body[found] is statement else None

    def is_before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """True if ``a`` starts before ``b`` in the source."""
        return self.order[id(a)] < self.order[id(b)]

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        if outer is inner:
            return True
        order = self.order
        first = order.get(id(outer))
        at = order.get(id(inner))
        if first is None or at is None:
            return any(a is outer for a in self.ancestors(inner))
        return first < at <= self._subtree_ends()[first]

    def span(self, node: cst.CSTNode) -> tuple[int, int] | None:
        """Preorder numbers of ``node`` and of the last node inside it (None: not from this
        module): with ``bisect`` on a sorted list of preorder numbers, the members of a
        table that sit inside ``node`` are found without walking it."""
        first = self.order.get(id(node))
        if first is None:
            return None
        return first, self._subtree_ends()[first]

    def order_of(self, node: cst.CSTNode) -> int | None:
        """``node``'s preorder number (None: not from this module)."""
        return self.order.get(id(node))

    def _subtree_ends(self) -> list[int]:
        """Preorder number -> the last preorder number inside that node's subtree."""
        ends = self._ends
        if ends is None:
            ends = list(range(len(self.preorder)))
            up = self._up
            for n in range(len(ends) - 1, 0, -1):
                p = up[n]
                if ends[n] > ends[p]:
                    ends[p] = ends[n]
            self._ends = ends
        return ends

    def _orders_of(self, cls: type) -> list[int]:
        found = self._type_orders.get(cls)
        if found is None:
            order = self.order
            found = self._type_orders[cls] = [order[id(n)] for n in self.by_type.get(cls, [])]
        return found

    def descendants(self, node: cst.CSTNode, cls: type | tuple[type, ...]) -> Iterator[cst.CSTNode]:
        """Nodes of ``cls`` inside ``node``, in document order (no walk: preorder ranges)."""
        first = self.order.get(id(node))
        if first is None:  # not from this module: walk it
            yield from _walk_descendants(node, cls)
            return
        last = self._subtree_ends()[first]
        if last == first:
            return
        types = self._matching_types.get(cls)
        if types is None:
            types = self._matching_types[cls] = [t for t in self.by_type if _matches(t, cls)]
        if last - first <= 16 * len(types) or len(types) > 4:
            preorder = self.preorder
            for n in range(first + 1, last + 1):
                current = preorder[n]
                if _matches(type(current), cls):
                    yield current
            return
        runs = []
        for t in types:
            orders = self._orders_of(t)
            lo = bisect.bisect_right(orders, first)
            hi = bisect.bisect_right(orders, last)
            if lo < hi:
                runs.append(self.by_type[t][lo:hi])
        if len(runs) == 1:
            yield from runs[0]
        elif runs:
            order = self.order
            yield from heapq.merge(*runs, key=lambda n: order[id(n)])

    # Tables by name, each built once on first use ------------------------------------------
    def calls_named(self, name: str) -> list[cst.Call]:
        """Calls of a bare name, ``name(...)``, in document order."""
        if self._calls_by_name is None:
            self._group_calls()
        assert self._calls_by_name is not None
        return self._calls_by_name.get(name, [])

    def method_calls(self, attr: str) -> list[cst.Call]:
        """Calls of an attribute, ``x.attr(...)``, in document order."""
        if self._calls_by_attr is None:
            self._group_calls()
        assert self._calls_by_attr is not None
        return self._calls_by_attr.get(attr, [])

    def _group_calls(self) -> None:
        by_name: dict[str, list[cst.Call]] = {}
        by_attr: dict[str, list[cst.Call]] = {}
        for call in self.by_type.get(cst.Call, []):
            func = call.func  # type: ignore[attr-defined]
            kind = type(func)
            if kind is cst.Name:
                by_name.setdefault(func.value, []).append(call)
            elif kind is cst.Attribute:
                by_attr.setdefault(func.attr.value, []).append(call)
        self._calls_by_name, self._calls_by_attr = by_name, by_attr

    def functions_named(self, name: str) -> list[cst.FunctionDef]:
        """Every ``def name`` of the module (any scope), in document order."""
        if self._functions is None:
            found: dict[str, list[cst.FunctionDef]] = {}
            for f in self.by_type.get(cst.FunctionDef, []):
                found.setdefault(f.name.value, []).append(f)  # type: ignore[attr-defined]
            self._functions = found
        return self._functions.get(name, [])

    def classes_named(self, name: str) -> list[cst.ClassDef]:
        """Every ``class name`` of the module (any scope), in document order."""
        if self._classes is None:
            found: dict[str, list[cst.ClassDef]] = {}
            for c in self.by_type.get(cst.ClassDef, []):
                found.setdefault(c.name.value, []).append(c)  # type: ignore[attr-defined]
            self._classes = found
        return self._classes.get(name, [])

    def keyword_arguments(self, keyword: str) -> list[cst.Arg]:
        """Arguments ``keyword=...`` of every call, in document order."""
        if self._keywords is None:
            found: dict[str, list[cst.Arg]] = {}
            for call in self.by_type.get(cst.Call, []):
                for arg in call.args:  # type: ignore[attr-defined]
                    if arg.keyword is not None:
                        found.setdefault(arg.keyword.value, []).append(arg)
            self._keywords = found
        return self._keywords.get(keyword, [])

    def rooted_at(self, name: str) -> tuple[list[cst.Name], list[cst.Attribute]]:
        """The ``Name`` nodes spelled ``name`` and the attribute chains whose root is one
        (``name.a``, ``name.a.b``), each list in document order."""
        if self._rooted is None:
            found: dict[str, tuple[list[cst.Name], list[cst.Attribute]]] = {}
            for node in self.by_type.get(cst.Name, []):
                found.setdefault(node.value, ([], []))[0].append(node)  # type: ignore[attr-defined]
            for node in self.by_type.get(cst.Attribute, []):
                root = node.value  # type: ignore[attr-defined]
                while type(root) is cst.Attribute:
                    root = root.value
                if type(root) is cst.Name:
                    found.setdefault(root.value, ([], []))[1].append(node)  # type: ignore[arg-type]
            self._rooted = found
        return self._rooted.get(name, ([], []))

    def attribute_targets(self) -> list[tuple[cst.Attribute, cst.BaseExpression | None]]:
        """``x.attr = value`` targets with their value (None: augmented), assignments first,
        then annotated ones, then augmented ones, each in document order."""
        found = self._attribute_targets
        if found is None:
            found = []
            for node in self.by_type.get(cst.Assign, []):
                for target in node.targets:  # type: ignore[attr-defined]
                    if isinstance(target.target, cst.Attribute):
                        found.append((target.target, node.value))  # type: ignore[attr-defined]
            for node in self.by_type.get(cst.AnnAssign, []):
                target = node.target  # type: ignore[attr-defined]
                if isinstance(target, cst.Attribute) and node.value is not None:  # type: ignore[attr-defined]
                    found.append((target, node.value))  # type: ignore[attr-defined]
            for node in self.by_type.get(cst.AugAssign, []):
                if isinstance(node.target, cst.Attribute):  # type: ignore[attr-defined]
                    found.append((node.target, None))  # type: ignore[attr-defined]
            self._attribute_targets = found
        return found


def _walk_descendants(node: cst.CSTNode, cls: type | tuple[type, ...]) -> Iterator[cst.CSTNode]:
    stack = [node]
    while stack:
        current = stack.pop()
        if current is not node and isinstance(current, cls):
            yield current
        children = _children(current)
        if children:
            children.reverse()
            stack.extend(children)
