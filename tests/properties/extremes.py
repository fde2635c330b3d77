"""Generators of hostile values: extreme numbers for the Python rules, alias graphs for YAML.

Numbers: integers of hundreds or thousands of digits, power towers, huge products, floats
past the float range, ``inf``/``nan`` spelled as calls or argparse defaults, and every
integer spelling (``0x1``, ``0o1``, ``0b1``, ``1_000``), alone or combined with the
arithmetic the resolver folds. YAML: documents whose anchors refer to earlier anchors,
with the size each one expands to computed here, independently of the loader, plus merge
keys whose result is predicted by Python's own dict semantics.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

_SMALL = st.sampled_from(["0", "1", "2", "10", "0.5", "0.99", "0.999", "-1", "1e-4"])
_SPELLED_ONE = st.sampled_from(["0x1", "0o1", "0b1", "1_0 // 1_0", "0X1", "1.", "1e0", "10e-1"])


@st.composite
def _huge_int(draw) -> str:
    digits = draw(st.integers(min_value=300, max_value=4200))
    return draw(st.sampled_from("123456789")) + "0" * (digits - 1)


_ATOMS = st.one_of(
    _SMALL,
    _SPELLED_ONE,
    _huge_int(),
    st.sampled_from(
        [
            "1e309",
            "-1e309",
            "1e-400",
            "5e-324",
            "1.7976931348623157e308",
            "float('inf')",
            "float('-inf')",
            "float('nan')",
            "math.inf",
            "math.nan",
            "math.exp(1000)",
            "int('9' * 5000)",
            "1j",
        ]
    ),
    st.builds(
        lambda a, b, c: f"{a} ** {b} ** {c}",
        st.sampled_from(["2", "10", "-3", "7"]),
        st.sampled_from(["10", "100", "1000"]),
        st.sampled_from(["3", "10", "100"]),
    ),
    st.builds(lambda e: f"10 ** {e} * 10 ** {e}", st.sampled_from(["300", "2100", "5000"])),
    st.builds(lambda e: f"1 << 10 ** {e}", st.sampled_from(["2", "6", "9"])),
)


def extreme_number() -> st.SearchStrategy[str]:
    """An expression a decay, a step count or an epoch may be written as, often extreme."""
    return st.recursive(
        _ATOMS,
        lambda inner: st.one_of(
            st.builds(lambda a: f"1 - ({a})", inner),
            st.builds(lambda a: f"-({a})", inner),
            st.builds(
                lambda a, op, b: f"({a}) {op} ({b})",
                inner,
                st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]),
                inner,
            ),
            st.builds(lambda f, a: f"{f}({a})", st.sampled_from(["min", "max", "abs"]), inner),
        ),
        max_leaves=4,
    )


NUMBER_TEMPLATES = (
    "from timm.utils import ModelEmaV2\nimport math\nema = ModelEmaV2(model, decay={v})\n",
    "import math\nfrom timm.utils import ModelEmaV3\nDECAY = {v}\n"
    "ema = ModelEmaV3(model, decay=DECAY, warmup_power={v})\n",
    "import argparse, math\nfrom timm.utils import ModelEmaV2\n"
    "p = argparse.ArgumentParser()\np.add_argument('--ema-decay', type=float, default={v})\n"
    "p.add_argument('--epochs', type=int, default={v})\nargs = p.parse_args()\n"
    "ema = ModelEmaV2(model, decay=args.ema_decay)\n"
    "for epoch in range(args.epochs):\n    train(model)\n    ema.update(model)\n",
    "import copy, math\nimport torch\ndecay = {v}\nema_model = copy.deepcopy(model)\n"
    "for step in range({v}):\n    loss.backward()\n    optimizer.step()\n"
    "    with torch.no_grad():\n"
    "        for e, p in zip(ema_model.parameters(), model.parameters()):\n"
    "            e.mul_(decay).add_(p, alpha=1 - decay)\n",
    "import math\nimport lightning.pytorch as pl\n"
    "from lightning.pytorch.callbacks import StochasticWeightAveraging\n"
    "trainer = pl.Trainer(max_epochs={v}, callbacks=[\n"
    "    StochasticWeightAveraging(swa_lrs={v}, swa_epoch_start={v})])\n",
    "import math\nfrom torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn\n"
    "ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn({v}))\n",
)


# YAML alias graphs ------------------------------------------------------------------------
@dataclass
class AliasGraph:
    text: str
    expanded: int  # nodes of the document with every alias expanded, as the loader counts
    target: str  # the decay's text as written (a literal, or where an alias points)


@st.composite
def alias_graph(draw) -> AliasGraph:
    """Anchors ``a0..an``, each a list of scalars or of aliases to earlier anchors."""
    count = draw(st.integers(min_value=1, max_value=9))
    sizes: list[int] = []
    lines: list[str] = []
    for i in range(count):
        width = draw(st.integers(min_value=1, max_value=9))
        if i == 0 or draw(st.integers(0, 5)) == 0:
            items = [str(draw(st.integers(0, 9))) for _ in range(width)]
            size = 1 + width
        else:
            refs = [draw(st.integers(0, i - 1)) for _ in range(width)]
            items = [f"*a{r}" for r in refs]
            size = 1 + sum(sizes[r] for r in refs)
        flow = draw(st.booleans())
        if flow:
            lines.append(f"a{i}: &a{i} [" + ", ".join(items) + "]")
        else:
            lines.append(f"a{i}: &a{i}\n" + "".join(f"  - {item}\n" for item in items).rstrip())
        sizes.append(size)
    decay = draw(st.sampled_from(["0.99", "0.9999", "0.5"]))
    lines.append(f"d: &d {decay}")
    lines.append("ema:")
    lines.append("  _target_: timm.utils.ModelEmaV2")
    lines.append("  decay: *d")
    used = draw(st.integers(0, count - 1))
    lines.append(f"  extra: *a{used}")
    # root mapping: 1, plus per key 1 + the value's size
    ema = 1 + (1 + 1) + (1 + 1) + (1 + sizes[used])
    expanded = 1 + sum(1 + s for s in sizes) + (1 + 1) + (1 + ema)
    return AliasGraph("\n".join(lines) + "\n", expanded, decay)


@st.composite
def merge_graph(draw) -> tuple[str, dict[str, int]]:
    """Mappings merged into one (``<<: [*m0, *m1]`` and own keys): the text and the expected
    mapping, by YAML's rule (own keys win, then earlier merged mappings)."""
    keys = st.sampled_from(["decay", "device", "a", "b", "c"])
    bases: list[dict[str, int]] = []
    lines: list[str] = []
    for i in range(draw(st.integers(1, 4))):
        mapping = draw(st.dictionaries(keys, st.integers(0, 99), min_size=1, max_size=4))
        bases.append(mapping)
        lines.append(f"m{i}: &m{i} " + "{" + ", ".join(f"{k}: {v}" for k, v in mapping.items()))
        lines[-1] += "}"
    chosen = draw(st.lists(st.integers(0, len(bases) - 1), min_size=1, max_size=4))
    own = draw(st.dictionaries(keys, st.integers(0, 99), max_size=3))
    if len(chosen) == 1:
        merge = f"*m{chosen[0]}"
    else:
        merge = "[" + ", ".join(f"*m{c}" for c in chosen) + "]"
    lines.append("out:")
    lines.append(f"  <<: {merge}")
    lines.extend(f"  {k}: {v}" for k, v in own.items())
    expected: dict[str, int] = {}
    for c in reversed(chosen):
        expected.update(bases[c])
    expected.update(own)
    return "\n".join(lines) + "\n", expected
