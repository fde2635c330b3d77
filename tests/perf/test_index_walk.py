"""Invariants of the fast index walk (its speed-ups must not change what it records)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from ema_lint.analysis.syntax.index import ModuleIndex, _children

SOURCES = [
    p for p in sorted((Path(__file__).parents[2] / "ema_lint").rglob("*.py")) if p.stat().st_size
][:12] + sorted((Path(__file__).parents[2] / "fixtures").rglob("*.py"))


def _preorder(node: cst.CSTNode) -> list[cst.CSTNode]:
    out = [node]
    for child in _children(node):
        out.extend(_preorder(child))
    return out


def test_walk_is_the_recursive_preorder_with_parents() -> None:
    for path in SOURCES:
        try:
            module = cst.parse_module(path.read_bytes())
        except cst.ParserSyntaxError:
            continue
        index = ModuleIndex(module)
        expected = _preorder(module)
        assert [index.order[id(n)] for n in expected] == list(range(len(expected))), path
        for node in expected:
            for child in _children(node):
                assert index.parent(child) is node
        by_type: dict[type, list[int]] = {}
        for node in expected:
            by_type.setdefault(type(node), []).append(id(node))
        assert {t: [id(n) for n in v] for t, v in index.by_type.items()} == by_type, path


def test_descendants_are_the_nodes_inside_in_document_order() -> None:
    module = cst.parse_module((Path(__file__).parents[2] / "ema_lint" / "engine.py").read_bytes())
    index = ModuleIndex(module)
    for function in index.nodes(cst.FunctionDef):
        inside = [c for c in index.nodes(cst.Call) if index.contains(function, c)]
        assert list(index.descendants(function, cst.Call)) == inside
        kinds = (cst.For, cst.If)
        nested = [
            n
            for n in (*index.nodes(cst.For), *index.nodes(cst.If))
            if n is not function and index.contains(function, n)
        ]
        nested.sort(key=lambda n: index.order[id(n)])
        assert list(index.descendants(function, kinds)) == nested
