"""How the analysis grows with the module: counted in Python calls, not timed.

A module with four times as many averaging objects (or four copies of a training script)
must cost about four times the calls, not sixteen: a rule or provider that rescans the
module once per object turns a large generated config or a long notebook into minutes.
Calls are counted with ``sys.setprofile``, so the test does not depend on the machine.
"""

from __future__ import annotations

import sys

from ema_lint import engine, registry


def _objects_module(count: int) -> str:
    lines = ["import torch", "from timm.utils import ModelEmaV2", ""]
    lines += [f"ema{i} = ModelEmaV2(model, decay=0.99)" for i in range(count)]
    lines += ["", "for x in loader:", "    loss = model(x).sum()", "    loss.backward()"]
    lines += ["    optimizer.step()"]
    lines += [f"    ema{i}.update(model)" for i in range(count)]
    lines += ["", "with torch.no_grad():"]
    lines += [f"    ema{i}.module(x)" for i in range(count)]
    return "\n".join(lines) + "\n"


_SCRIPT = """
def train_{n}(model, loader, optimizer, args):
    ema = ModelEmaV2(model, decay=args.ema_decay)
    for epoch in range(args.epochs):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y) / args.accum
            loss.backward()
            if (i + 1) % args.accum == 0:
                optimizer.step()
                optimizer.zero_grad()
            ema.update(model)
        with torch.no_grad():
            ema.module(x)
    return ema
"""


def _script_module(copies: int) -> str:
    head = "import torch\nfrom timm.utils import ModelEmaV2\n"
    return head + "".join(_SCRIPT.format(n=n) for n in range(copies))


def _copies_of_one_script(copies: int) -> str:
    """One script pasted ``copies`` times (as the concatenation benchmark does): every copy
    defines the same function and calls it, so each call resolves to every copy."""
    script = "import torch\nfrom timm.utils import ModelEmaV2\n" + _SCRIPT.format(n="main")
    return (script + "\ntrain_main(model, loader, optimizer, args)\n") * copies


def _calls(source: str) -> int:
    settings = engine.FileSettings(rules=tuple(registry.all_rules()))
    engine.lint(_objects_module(1), "warm.py", settings)  # one-time costs out of the count
    counted = 0

    def count(frame, event, arg):
        nonlocal counted
        if event == "call":
            counted += 1

    sys.setprofile(count)
    try:
        engine.lint(source, "train.py", settings)
    finally:
        sys.setprofile(None)
    return counted


def test_four_times_the_averaging_objects_cost_about_four_times_the_calls() -> None:
    small, large = _calls(_objects_module(25)), _calls(_objects_module(100))
    assert large < 6 * small, f"{large / small:.1f}x the calls for 4x the objects"


def test_four_copies_of_a_training_script_cost_about_four_times_the_calls() -> None:
    small, large = _calls(_script_module(2)), _calls(_script_module(8))
    assert large < 6 * small, f"{large / small:.1f}x the calls for 4x the script"


def test_copies_of_one_script_with_same_named_functions_cost_about_four_times_the_calls() -> None:
    # Each call resolves to every copy; answers shared per name keep it near 4x (was 4.7x).
    small, large = _calls(_copies_of_one_script(8)), _calls(_copies_of_one_script(32))
    assert large < 4.5 * small, f"{large / small:.2f}x the calls for 4x the copies"
