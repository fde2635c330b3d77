"""The command, the docs generator, the reporters and the runner import one another
without a cycle (imports inside functions count: a cycle there is a cycle of design)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ema_lint"
LAYER = ("ema_lint.cli", "ema_lint.docs", "ema_lint.reporters", "ema_lint.runner")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = node.module or ""
                prefix = (base + "." + module).strip(".") if node.level else module
                targets = [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _component(name: str) -> str:
    """A layer module stands for itself and its submodules (a package importing its own
    submodules is not a cycle between components)."""
    for m in LAYER:
        if name == m or name.startswith(m + "."):
            return m
    return name


def _in_layer(name: str) -> bool:
    return _component(name) in LAYER


def _components(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for name, targets in graph.items():
        here = _component(name)
        merged.setdefault(here, set()).update(_component(t) for t in targets)
        merged[here].discard(here)
    return merged


def _cycle_through_layer(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle among the layer's modules (through any module), as a path, or None."""
    for start in (n for n in graph if _in_layer(n)):
        stack = [(start, [start])]
        seen: set[str] = set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    return None


def test_no_import_cycle_through_cli_docs_reporters_runner() -> None:
    cycle = _cycle_through_layer(_components(_graph()))
    assert cycle is None, " -> ".join(cycle or [])
