"""Import aliases to qualified names, built from the module's import statements only.

libcst's ``QualifiedNameProvider`` resolves every name of the module through full scope
analysis and costs several parses' worth of time; the rules only ever ask "is this call
``timm.utils.ModelEmaV3`` under whatever name it was imported?", which the import statements
alone answer. Imports anywhere in the file count (scripts import inside ``main()``); names
bound by ``try: from a import X / except ImportError: from b import X`` keep every candidate,
in a fixed order, so results never depend on hash seeds.
"""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext


def dotted_name(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def _module_name(node: cst.BaseExpression | None, relative: int) -> str:
    base = dotted_name(node) if node is not None else ""
    return "." * relative + (base or "")


class ImportTable:
    """Local names bound by imports, mapped to the qualified names they stand for."""

    def __init__(self) -> None:
        self.aliases: dict[str, list[str]] = {}
        self.star_modules: list[str] = []

    @classmethod
    def build(cls, ctx: FileContext) -> ImportTable:
        table = cls()
        for node in ctx.nodes(cst.Import):
            for alias in node.names:
                full = dotted_name(alias.name)
                if full is None:
                    continue
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    table._bind(alias.asname.name.value, full)
                else:
                    head = full.split(".", 1)[0]
                    table._bind(head, head)
        for node in ctx.nodes(cst.ImportFrom):
            module = _module_name(node.module, len(node.relative))
            # A relative import also stands for its absolute name (``.nn`` -> ``pkg.nn``),
            # when the file's package is known, so it matches the API table's entries.
            absolute = None
            if node.relative:
                if ctx.project:
                    absolute = ctx.project.absolute(module)
                elif ctx.absolute is not None:
                    absolute = ctx.absolute(module)
            if isinstance(node.names, cst.ImportStar):
                table.star_modules.append(module)
                continue
            for alias in node.names:
                name = dotted_name(alias.name)
                if name is None:
                    continue
                local = name
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    local = alias.asname.name.value
                # ``from . import x`` is ``.x`` (the module is only dots), not ``..x``.
                joined = f"{module}{name}" if module.endswith(".") else f"{module}.{name}"
                table._bind(local, joined if module else name)
                if absolute:
                    table._bind(local, f"{absolute}.{name}")
        return table

    def _bind(self, local: str, qualified: str) -> None:
        targets = self.aliases.setdefault(local, [])
        if qualified not in targets:
            targets.append(qualified)

    def qualified_names(self, node: cst.CSTNode) -> tuple[str, ...]:
        """Every qualified name ``node`` (a Name/Attribute chain) may stand for."""
        dotted = dotted_name(node)
        if dotted is None:
            return ()
        head, _, rest = dotted.partition(".")
        bound = self.aliases.get(head)
        if bound:
            return tuple(f"{b}.{rest}" if rest else b for b in bound)
        if self.star_modules:
            # A star import hands on every public name of its module, the modules it
            # imports included (``import torch`` there makes ``torch.nn...`` work here).
            return (*(f"{m}.{dotted}" for m in self.star_modules), dotted)
        return ()

    def resolve(self, node: cst.CSTNode, known: set[str] | dict[str, object]) -> str | None:
        """The first qualified name of ``node`` that is in ``known``."""
        for name in self.qualified_names(node):
            if name in known:
                return name
        return None

    def local_reference(self, qualified: str) -> str | None:
        """How this module can already spell ``qualified`` (for fixes), or None."""
        best: str | None = None
        for local, targets in sorted(self.aliases.items()):
            for target in targets:
                if qualified == target:
                    return local
                if qualified.startswith(target + "."):
                    candidate = local + qualified[len(target) :]
                    if best is None or len(candidate) < len(best):
                        best = candidate
        return best
