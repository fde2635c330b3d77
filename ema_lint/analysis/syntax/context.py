"""The facts about one module that rules share, each computed once and only when asked for.

A *provider* is any class with a ``build(ctx)`` classmethod. ``ctx.get(Provider)`` builds it
on first use from the module index (no extra traversal) and caches it, so the import table,
the value resolver or the training-loop model exist only for files whose rules need them,
and never twice. A provider that fails is cached as failed: every rule that needs it is then
reported as crashed on that file, while the other rules still run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import libcst as cst

from ema_lint.analysis.syntax.index import ModuleIndex

T = TypeVar("T")


class Provider(Protocol):
    @classmethod
    def build(cls, ctx: FileContext) -> Any: ...


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_UNSET: Any = object()


class FileContext:
    """One parsed module and the lazily built facts about it."""

    def __init__(
        self,
        module: cst.Module,
        path: str,
        project: Callable[[FileContext], Any] | None = None,
        absolute: Callable[[str], str | None] | None = None,
    ) -> None:
        self.module = module
        self.path = path
        # Without a project: the absolute name of a relative import (``.nn`` -> ``pkg.nn``)
        # from the file's package, so that a summary matches the API table's entries too.
        self.absolute = absolute
        self.index = ModuleIndex(module)
        self._facts: dict[type, Any] = {}
        self._project_factory = project
        self._project: Any = _UNSET

    def release(self) -> None:
        """Let the facts and the tree go now. Facts refer back to the context (and some to
        themselves), so a finished context is cyclic garbage: left to the collector, each
        linted file's tree (70 MB for a 200 kB module) would wait for a collection of an
        older generation, which a batch run's schedule makes rare. Not for use after."""
        facts = list(self._facts.values())
        self._facts.clear()
        for fact in facts:  # facts hold each other and the index: cycles, cut here
            _empty(fact)
        self._project = None
        self._project_factory = None
        self.module = None  # type: ignore[assignment]
        self.index = None  # type: ignore[assignment]

    @property
    def project(self) -> Any:
        """What the other modules of the project say (``analysis.project.ProjectLink``), or
        None for a text with no project around it. Built on first use; lower layers ask it
        questions through duck typing, so they never import the project layer."""
        if self._project is _UNSET:
            factory = self._project_factory
            try:
                self._project = factory(self) if factory is not None else None
            except Exception:
                self._project = None
        return self._project

    def get(self, provider: type[T]) -> T:
        facts = self._facts
        if provider in facts:
            value = facts[provider]
        else:
            facts[provider] = _building = _Failed(
                RecursionError(f"{provider.__name__} needs itself")
            )
            try:
                value = provider.build(self)  # type: ignore[attr-defined]
            except Exception as error:
                value = _Failed(error)
            if facts.get(provider) is _building:
                facts[provider] = value
        if isinstance(value, _Failed):
            raise value.error
        return value

    # Shorthands for the index, which every rule uses.
    def nodes(self, cls: type[cst.CSTNode]) -> list[cst.CSTNode]:
        return self.index.nodes(cls)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        return self.index.parent(node)

    def code(self, node: cst.CSTNode) -> str:
        """Source text of a node, for messages."""
        return self.module.code_for_node(node)


def _empty(obj: object) -> None:
    """Drop every attribute of ``obj`` (instance dictionary and slots)."""
    attributes = getattr(obj, "__dict__", None)
    if attributes is not None:
        attributes.clear()
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__"):
                with contextlib.suppress(AttributeError):  # a slot never set
                    delattr(obj, name)
