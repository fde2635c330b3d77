"""One rule's metadata as plain data (``RuleInfo``): what the generated manifest holds.

Its own module so that the manifest's data (``_manifest.py``), the registry that reads it
and the generator (``manifest.py``) depend on it and not on one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .options import Option

if TYPE_CHECKING:
    from .rule import Rule

Trigger = bytes  # plain bytes, Identifier, Component or Names (see ema_lint.prefilter)


@dataclass(frozen=True, eq=False)
class RuleInfo:
    """One rule's metadata, as the rule class declares it (see ``ema_lint.rule.Rule``).

    Compared and hashed by identity, like the class it stands for (the pre-filters of a run
    are memoized by the tuple of their rules).
    """

    code: str
    name: str
    class_name: str
    summary: str
    default_enabled: bool = True
    internal: bool = False
    fix_availability: str = "none"
    fix_applicability: str | None = None
    options: tuple[Option, ...] = ()
    triggers: tuple[Trigger, ...] = ()
    trigger_groups: tuple[tuple[tuple[Trigger, ...], ...], ...] = ()

    @property
    def __name__(self) -> str:  # what the pre-filter names in its errors, as for a class
        return self.class_name

    @classmethod
    def of(cls, rule: type[Rule]) -> RuleInfo:
        """The entry of a rule class."""
        applicability = rule.fix_applicability
        return cls(
            code=rule.code,
            name=rule.name,
            class_name=rule.__name__,
            summary=rule.summary,
            default_enabled=bool(rule.default_enabled),
            internal=bool(getattr(rule, "internal", False)),
            fix_availability=rule.fix_availability.value,
            fix_applicability=applicability.value if applicability is not None else None,
            options=tuple(rule.options),
            triggers=tuple(rule.triggers),
            trigger_groups=tuple(
                tuple(tuple(alternatives) for alternatives in group)
                for group in getattr(rule, "trigger_groups", ())
            ),
        )
