"""Statement edit recipes keep comments, layout and indentation."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.index import ModuleIndex
from ema_lint.fixer import apply_fixes
from ema_lint.statement_edits import move_after, without_argument, wrap_in_if

SOURCE = """\
for i, x in enumerate(loader):
    with autocast():
        loss = model(x)

        # keep the average
        ema.update(model)  # every step
    loss.backward()
    if (i + 1) % 4 == 0:
        if scaler:
            scaler.step(opt)
        opt.zero_grad()
"""


def _statements(module: cst.Module, text: str) -> cst.CSTNode:
    index = ModuleIndex(module)
    for line in index.nodes(cst.SimpleStatementLine):
        if module.code_for_node(line).strip().endswith(text):
            return line
    raise AssertionError(text)


def test_move_into_a_deeper_block_and_out_of_a_with() -> None:
    module = cst.parse_module(SOURCE)
    moved = _statements(module, "ema.update(model)  # every step")
    target = _statements(module, "scaler.step(opt)")
    fixed = apply_fixes(module, ModuleIndex(module), [move_after(moved, target, "move")]).code
    assert fixed == SOURCE.replace(
        "\n\n        # keep the average\n        ema.update(model)  # every step\n", "\n"
    ).replace(
        "            scaler.step(opt)\n",
        "            scaler.step(opt)\n"
        "            # keep the average\n"
        "            ema.update(model)  # every step\n",
    )
    cst.parse_module(fixed)


def test_wrap_in_if_keeps_the_comments_above() -> None:
    module = cst.parse_module("# note\nema.step(p)  # here\n")
    line = module.body[0]
    wrapped = wrap_in_if(line, cst.parse_expression("acc.sync_gradients"))
    assert module.with_changes(body=[wrapped]).code == (
        "# note\nif acc.sync_gradients:\n    ema.step(p)  # here\n"
    )


def test_without_argument_keeps_layout_and_comment() -> None:
    call = cst.parse_expression("f(\n    a,\n    device='cpu',  # why\n    b=1,\n)")
    assert isinstance(call, cst.Call)
    code = cst.Module([]).code_for_node(without_argument(call, call.args[1]))
    assert code == "f(\n    a,  # why\n    b=1,\n)"
    last = cst.parse_expression("f(a, device='cpu')")
    assert cst.Module([]).code_for_node(without_argument(last, last.args[1])) == "f(a)"
