"""The single traversal and the cheap positions, without any rule."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ema_lint.analysis.index import ModuleIndex
from ema_lint.positions import PositionTable

SOURCE = """\
import torch


@decorator(1)
def train(model, loader):
    for step, batch in enumerate(loader):
        loss = model(batch).sum()  # comment
        loss.backward()
        if (step + 1) % 4 == 0:
            optimizer.step()
    return [x ** 2 for x in range(3)]
"""


def test_index_sees_every_expression_node_libcst_sees() -> None:
    module = cst.parse_module(SOURCE)
    index = ModuleIndex(module)

    seen: dict[type, int] = {}

    class Count(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.BaseExpression, cst.BaseStatement, cst.BaseSmallStatement)):
                seen[type(node)] = seen.get(type(node), 0) + 1
            return True

    module.visit(Count())
    for node_type, count in seen.items():
        assert len(index.nodes(node_type)) == count, node_type


def test_parents_order_and_statements() -> None:
    module = cst.parse_module(SOURCE)
    index = ModuleIndex(module)
    [step_call] = [
        c
        for c in index.nodes(cst.Call)
        if isinstance(c.func, cst.Attribute) and c.func.attr.value == "step"
    ]
    backward = next(
        c
        for c in index.nodes(cst.Call)
        if isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"
    )
    assert index.is_before(backward, step_call)
    assert isinstance(index.enclosing(step_call, cst.If), cst.If)
    assert isinstance(index.enclosing(step_call, cst.For), cst.For)
    assert isinstance(index.statement(step_call), cst.SimpleStatementLine)
    # Decorators are before the function body.
    decorator_call = index.nodes(cst.Decorator)[0].decorator
    assert index.is_before(decorator_call, backward)


def test_positions_match_libcst_position_provider() -> None:
    module = cst.parse_module(SOURCE)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    expected = wrapper.resolve(PositionProvider)
    index = ModuleIndex(module)
    nodes = [
        *index.nodes(cst.Call),
        *index.nodes(cst.Name),
        *index.nodes(cst.SimpleStatementLine),
        *index.nodes(cst.For),
        *index.nodes(cst.If),
        *index.nodes(cst.FunctionDef),
    ]
    table = PositionTable(module, nodes)
    assert table.text == SOURCE
    for node in nodes:
        start, end = table.range(node)
        want = expected[node]
        assert (start.line, start.column - 1) == (want.start.line, want.start.column), node
        if not isinstance(node, (cst.For, cst.If, cst.FunctionDef)):
            assert (end.line, end.column - 1) == (want.end.line, want.end.column), node
