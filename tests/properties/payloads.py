"""Averaging code to splice into arbitrary programs, so that the rules have something to read.

Generated programs almost never name an averaging API, so on their own they would only
test the pre-filter. Every API of the table with an averaging weight is turned into a
constructor call (imported under its name, an alias, or through its module), with values
inside and outside every rule's range, written as literals, constants, ``1 - x``, and
mixed with hand-written updates and precision casts. The pieces are then inserted between
and inside the generated statements.
"""

from __future__ import annotations

import keyword

import libcst as cst
from hypothesis import strategies as st

from ema_lint.analysis.objects.apis import API_TABLE

VALUES = (
    "0.9",
    "0.99",
    "0.995",
    "0.999",
    "0.9998",
    "0.9999",
    "0.99999",
    "0.5",
    "1.0",
    "1",
    "0",
    "1.5",
    "-0.1",
    "1e-4",
    "2e-4",
    "0.001",
    "0.01",
    "1 - 1e-4",
    "1 - 0.999",
    "(1 - 0.99)",
    "DECAY",
    "cfg.decay",
    "args.ema_decay",
    "0.5 ** (1 / 20)",
)
_FIRST_ARGUMENTS = {
    "model": "model",
    "parameters": "model.parameters()",
    "params": "params",
    "new_tensors": "params",
    "target_params": "ema_params",
    "optimizer": "optimizer",
    "learning_rate": "1e-3",
}


def _specs() -> list:
    return sorted(
        (s for s in API_TABLE.specs if s.weight is not None), key=lambda spec: spec.qualname
    )


SPECS = _specs()

identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and not keyword.issoftkeyword(name)
)


@st.composite
def api_call(draw) -> tuple[list[str], str]:
    """(import lines, a statement constructing or calling an averaging API)."""
    spec = draw(st.sampled_from(SPECS))
    module, _, name = spec.qualname.rpartition(".")
    style = draw(st.sampled_from(["from", "alias", "module"]))
    if style == "from":
        imports, callee = [f"from {module} import {name}"], name
    elif style == "alias":
        alias = "Avg_" + draw(identifiers)
        imports, callee = [f"from {module} import {name} as {alias}"], alias
    else:
        imports, callee = [f"import {module}"], spec.qualname
    weight = spec.weight
    assert weight is not None
    arguments = []
    first = spec.params[0] if spec.params else None
    if first in _FIRST_ARGUMENTS and first != weight.param:
        arguments.append(_FIRST_ARGUMENTS[first])
    value = draw(st.sampled_from(VALUES))
    position = spec.position_of(weight.param)
    if position is not None and position == len(arguments) and draw(st.booleans()):
        arguments.append(value)
    else:
        arguments.append(f"{weight.param}={value}")
    target = draw(identifiers)
    return imports, f"{target} = {callee}({', '.join(arguments)})"


HAND_MADE = (
    "for p_ema, p in zip(ema.parameters(), model.parameters()):\n"
    "    p_ema.mul_({v}).add_(p, alpha=1 - {v})",
    "for s, p in zip(shadow, params):\n    s.lerp_(p, 1 - {v})",
    "ema_model = copy.deepcopy(model).half()",
    "ema_model = copy.deepcopy(model.to(torch.bfloat16))",
    "ema.to(device, dtype=torch.float16)",
    "ema.half()",
    "DECAY = {v}",
    "optimizer.step()",
    "loss.backward()",
    "ema.update(model)",
    "ema.step(model.parameters())",
)


@st.composite
def payload(draw) -> tuple[list[str], list[str]]:
    """(import lines, statements) of averaging code."""
    imports: list[str] = ["import copy", "import torch"]
    statements: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            more, statement = draw(api_call())
            imports += more
        else:
            statement = draw(st.sampled_from(HAND_MADE)).format(v=draw(st.sampled_from(VALUES)))
        statements.append(statement)
    return imports, statements


class _Insert(cst.CSTTransformer):
    """Put statements into blocks: ``where`` maps a block's preorder number to statements."""

    def __init__(self, where: dict[int, list[cst.BaseStatement]]) -> None:
        super().__init__()
        self.where = where
        self.count = 0

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        self.count += 1
        extra = self.where.get(self.count)
        if not extra:
            return updated_node
        body = list(updated_node.body)
        return updated_node.with_changes(body=[*extra, *body])


@st.composite
def spliced(draw, program: str) -> str | None:
    """``program`` with averaging code at the top, between and inside its statements."""
    try:
        module = cst.parse_module(program)
    except Exception:
        return None
    imports, statements = draw(payload())
    parsed = []
    for text in statements:
        try:
            parsed.append(cst.parse_statement(text + "\n"))
        except Exception:
            return None
    blocks = sum(1 for _ in _blocks(module))
    top: list[cst.BaseStatement] = []
    inside: dict[int, list[cst.BaseStatement]] = {}
    for statement in parsed:
        if blocks and draw(st.booleans()):
            inside.setdefault(draw(st.integers(1, blocks)), []).append(statement)
        else:
            top.append(statement)
    module = module.visit(_Insert(inside))
    body = list(module.body)
    for statement in top:
        body.insert(draw(st.integers(0, len(body))), statement)
    header = [cst.parse_statement(line + "\n") for line in dict.fromkeys(imports)]
    return module.with_changes(body=[*header, *body]).code


def _blocks(module: cst.Module):
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.IndentedBlock):
            yield node
        stack.extend(node.children)
