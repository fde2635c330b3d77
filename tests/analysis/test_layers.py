"""The analysis layers import only downwards, and no module of ema_lint imports itself back.

The layers of ``ema_lint/analysis``, bottom up: ``syntax`` (names, values), ``objects``
(averaging objects, their updates, the API table), ``training`` (the loop), ``project``
(across files). A module may import its own layer and those below it. Imports inside
functions count too: a lazy import that closes a cycle is still a cycle a newcomer trips on.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ema_lint"
LAYERS = ("syntax", "objects", "training", "project")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> set[str]:
    path = MODULES[name]
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            # ``from pkg import sub`` needs the submodule; ``from pkg import name``, pkg.
            subs = [f"{module}.{alias.name}" for alias in node.names]
            targets = [s for s in subs if s in MODULES] or [module]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _layer(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] == "analysis" and parts[2] in LAYERS:
        return LAYERS.index(parts[2])
    return None


def test_every_analysis_module_sits_in_a_layer() -> None:
    loose = [
        name for name in MODULES if name.startswith("ema_lint.analysis.") and _layer(name) is None
    ]
    assert loose == [], f"analysis modules outside the layers {LAYERS}: {loose}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _layer(n) is not None))
def test_a_layer_imports_only_its_own_and_lower_layers(name: str) -> None:
    mine = _layer(name)
    upward = sorted(d for d in GRAPH[name] if (_layer(d) or -1) > mine)
    assert upward == [], f"{name} (layer {LAYERS[mine]}) imports upwards: {upward}"


def _cycles() -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in sorted(GRAPH[node]):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    return cycles


def test_no_import_cycles() -> None:
    assert _cycles() == []
