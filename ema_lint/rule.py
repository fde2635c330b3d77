"""The shape of a rule: metadata as class attributes, visitor methods, one ``report`` call.

A rule module defines one ``Rule`` subclass. The engine calls its ``visit_<Node>`` methods
(``visit_Call``, ``visit_For``...) for every node of that libcst type, in document order,
after the module's shared facts are available through ``self.ctx``; then ``finish()``.
Rules see no ``leave_`` events: nesting questions go to the index (``ctx.index.enclosing``)
and to the shared analysis providers.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import libcst as cst

from .analysis.syntax.context import FileContext
from .diagnostics import Applicability, Fix, FixAvailability, FixScope

# Options live in a module of their own so that configuration can be validated without
# importing libcst; rule modules keep importing them from here.
from .options import Option as Option
from .options import OptionError as OptionError
from .options import rule_options_from as rule_options_from


@dataclass(eq=False)
class PendingReport:
    """A finding before positions are known."""

    rule: Rule
    node: cst.CSTNode
    message: str
    fix: Fix | None
    # Set by ``report_unused_suppression``: the report stands only if this token of the
    # suppression comment on the node's line silenced no finding (judged after the others).
    noqa_token: str | None = None
    # Other places of the same module the finding rests on, each with what it is there
    # (SARIF relatedLocations): e.g. the call that uses a value reported where it is written.
    related: tuple[tuple[cst.CSTNode, str], ...] = ()


class Rule:
    """Base class of every rule. Subclasses set the class attributes below."""

    code: ClassVar[str] = ""
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True
    fix_availability: ClassVar[FixAvailability] = FixAvailability.NONE
    # The applicability of the fixes this rule usually offers (None when it has no fix).
    fix_applicability: ClassVar[Applicability | None] = None
    # The lines its fixes may change (see FixScope); checked by tests/properties.
    fix_scope: ClassVar[FixScope] = FixScope.STATEMENT
    # Byte strings of which a file must contain at least one for this rule to find anything.
    triggers: ClassVar[tuple[bytes, ...]] = ()
    # Conjunctions, for rules whose findings need two kinds of evidence: a file also matches
    # when, for one group, it contains a token of every set of the group (``((b"parameters",
    # b"state_dict"), (b"ema", b"EMA"))``: a weight method AND a word for an average).
    trigger_groups: ClassVar[tuple[tuple[tuple[bytes, ...], ...], ...]] = ()
    # Analysis providers the rule reads (documentation of what it costs; built lazily).
    requires: ClassVar[tuple[type, ...]] = ()
    options: ClassVar[tuple[Option, ...]] = ()

    def __init__(
        self,
        ctx: FileContext,
        settings: Mapping[str, Any] | None = None,
        peers: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.settings: dict[str, Any] = {o.name: o.default for o in self.options}
        if settings:
            self.settings.update(settings)
        self._peers = peers or {}
        self.reports: list[PendingReport] = []

    def peer_setting(self, rule_name: str, option: str, default: Any) -> Any:
        """Another rule's configured ``option`` (``default`` when not set): for rules that
        hand a case to a peer and must draw the line where the user put the peer's."""
        return self._peers.get(rule_name, {}).get(option, default)

    def report(
        self,
        node: cst.CSTNode,
        message: str,
        fix: Fix | None = None,
        related: Sequence[tuple[cst.CSTNode, str]] = (),
    ) -> None:
        """Record a finding on ``node`` (its range is the finding's range); ``related`` are
        other nodes of the module it rests on, each with a short note of what it is."""
        self.reports.append(PendingReport(self, node, message, fix, related=tuple(related)))

    def report_unused_suppression(
        self, comment: cst.CSTNode, token: str, message: str, fix: Fix | None = None
    ) -> None:
        """Report ``token`` of the noqa directive in ``comment`` if it turns out to silence
        nothing; the engine decides, once every other rule's findings are placed."""
        self.reports.append(PendingReport(self, comment, message, fix, noqa_token=token))

    def finish(self) -> None:
        """Called once after every visit method has run; for whole-module checks."""

    # Introspection used by the engine and the docs -----------------------------------------
    @classmethod
    def visited_types(cls) -> dict[type, str]:
        """libcst node classes this rule visits, mapped to the method name."""
        found: dict[type, str] = {}
        for attr in dir(cls):
            if attr.startswith("visit_"):
                node_type = getattr(cst, attr[len("visit_") :], None)
                if isinstance(node_type, type) and issubclass(node_type, cst.CSTNode):
                    found[node_type] = attr
        return found

    @classmethod
    def documentation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def option(cls, name: str) -> Option:
        for option in cls.options:
            if option.name == name:
                return option
        raise KeyError(name)


def all_visited_types(rules: Sequence[Rule]) -> set[type]:
    types: set[type] = set()
    for rule in rules:
        types.update(type(rule).visited_types())
    return types
