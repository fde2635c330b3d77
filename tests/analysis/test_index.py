"""The single traversal and the cheap positions, without any rule."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from ema_lint.analysis.syntax.index import ModuleIndex, _walk_descendants
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


TABLES = """\
class Trainer:
    def __init__(self, model):
        self.ema = EMA(model)
        self.ema.decay: float = 0.9
        self.steps += 1

    def step(self):
        self.update(x, decay=0.9)
        update(self.ema)


def update(ema, decay=0.99):
    def update():
        pass
    return ema.update(decay=decay)
"""


def _walked(node: cst.CSTNode, cls) -> list[int]:
    """Descendants by a walk of the subtree (what ``descendants`` did before it had ranges)."""
    return [id(n) for n in _walk_descendants(node, cls)]


def test_descendants_and_contains_agree_with_a_walk_of_the_subtree() -> None:
    for source in (SOURCE, TABLES):
        module = cst.parse_module(source)
        index = ModuleIndex(module)
        for cls in (cst.Call, cst.Name, (cst.Name, cst.Attribute), cst.BaseExpression):
            for outer in index.preorder:
                assert [id(n) for n in index.descendants(outer, cls)] == _walked(outer, cls)
        calls = index.nodes(cst.Call)
        for outer in index.preorder:
            for call in calls:
                expected = outer is call or any(a is outer for a in index.ancestors(call))
                assert index.contains(outer, call) is expected


def test_tables_by_name_answer_module_wide_questions() -> None:
    module = cst.parse_module(TABLES)
    index = ModuleIndex(module)
    assert [c.func.value.value for c in index.method_calls("update")] == ["self", "ema"]
    assert [module.code_for_node(c) for c in index.calls_named("update")] == ["update(self.ema)"]
    assert [f.name.value for f in index.functions_named("update")] == ["update", "update"]
    assert [c.name.value for c in index.classes_named("Trainer")] == ["Trainer"]
    assert [a.value.value for a in index.keyword_arguments("decay")] == ["0.9", "decay"]
    targets = [(module.code_for_node(t), v is None) for t, v in index.attribute_targets()]
    assert targets == [("self.ema", False), ("self.ema.decay", False), ("self.steps", True)]
    names, chains = index.rooted_at("ema")
    assert len(names) == 5  # the `.ema` of self.ema three times, the parameter, the receiver
    assert [module.code_for_node(c) for c in chains] == ["ema.update"]


STATEMENTS = """\
import torch\r
\r
# a comment\r
@decorator(1)\r
\r
@other\r
def train(model):\r
    x = 1; ema.update(model)\r
    return x\r
\x0c
class A:\r
    def f(self):\r
        if self.ema: torch.save(self.ema)\r
\r
y = [\r
    ema(x),\r
]\r
"""


def test_positions_of_a_few_statements_agree_with_the_whole_module() -> None:
    module = cst.parse_module(STATEMENTS)
    index = ModuleIndex(module)
    nodes = [n for n in index.preorder if n is not module]
    whole = PositionTable(module, nodes, STATEMENTS)
    parts = PositionTable(module, nodes, STATEMENTS, index)
    assert parts._whole_chunk is None, "only the statements holding the nodes are generated"
    for node in nodes:
        assert parts.range(node) == whole.range(node), node
    by_whole = sorted(nodes, key=whole.offsets)
    assert sorted(nodes, key=parts.offsets) == by_whole
    assert parts.text == whole.text and parts.lines.line_text(8) == whole.lines.line_text(8)


def test_positions_fall_back_to_the_whole_module_when_unsure() -> None:
    source = "x = 1\ry = ema(x)\n"  # a lone carriage return: the parsers count lines apart
    module = cst.parse_module(source)
    index = ModuleIndex(module)
    [call] = index.nodes(cst.Call)
    table = PositionTable(module, [call], source, index)
    assert table._whole_chunk is not None
    assert table.range(call)[0] == PositionTable(module, [call], source).range(call)[0]
