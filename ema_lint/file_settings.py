"""What to run on one file: the enabled rules (after per-file ignores) and their options.

Configuration resolves rules by code, from the rule manifest; the rule classes (and with
them libcst) are imported only when the engine asks for them (``rules``), so a run whose
files are all settled by the pre-filter or the cache never loads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .diagnostics import Fix
    from .rule import Rule
    from .rule_info import RuleInfo


class FileSettings:
    """The enabled rules of one file (as classes, or as codes resolved on first use)."""

    __slots__ = (
        "_filter_rules",
        "_rules",
        "codes",
        "ignored",
        "noqa",
        "options",
        "prefilter",
        "unsafe_fixes",
    )

    def __init__(
        self,
        rules: Iterable[type[Rule]] | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        noqa: bool = True,
        unsafe_fixes: bool = False,
        prefilter: bool = True,
        ignored: frozenset[str] = frozenset(),
        *,
        codes: Iterable[str] | None = None,
    ) -> None:
        if rules is not None:
            self._rules: tuple[type[Rule], ...] | None = tuple(rules)
            self.codes: tuple[str, ...] = tuple(rule.code for rule in self._rules)
        else:
            self._rules = None  # registered rules by code: resolved on first use
            self.codes = tuple(codes or ())
        self.options: Mapping[str, Mapping[str, Any]] = options if options is not None else {}
        self.noqa = noqa
        self.unsafe_fixes = unsafe_fixes
        self.prefilter = prefilter
        # Codes ignored for this file; EMA9xx errors are dropped only when listed here.
        self.ignored = frozenset(ignored)
        self._filter_rules: tuple[Any, ...] | None = None

    @property
    def rules(self) -> tuple[type[Rule], ...]:
        """The rule classes (importing the rule modules the first time)."""
        if self._rules is None:
            from .registry import by_code

            found = by_code()
            self._rules = tuple(found[code] for code in self.codes)
        return self._rules

    def visitor_rules(self) -> tuple[type[Rule], ...]:
        return tuple(r for r in self.rules if not getattr(r, "internal", False))

    def filter_rules(self) -> tuple[type[Rule] | RuleInfo, ...]:
        """What the pre-filter is built from: manifest entries unless classes were given."""
        if self._filter_rules is None:
            if self._rules is not None:
                self._filter_rules = self.visitor_rules()
            else:
                from .registry import info

                entries = (info(code) for code in self.codes)
                self._filter_rules = tuple(e for e in entries if e is not None and not e.internal)
        return self._filter_rules

    def allows(self, fix: Fix) -> bool:
        from .diagnostics import Applicability

        return fix.applicability is Applicability.SAFE or self.unsafe_fixes

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.codes,
            self.options,
            self.noqa,
            self.unsafe_fixes,
            self.prefilter,
            self.ignored,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileSettings):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # options are a dict

    def __repr__(self) -> str:
        return (
            f"FileSettings(codes={self.codes!r}, options={self.options!r}, noqa={self.noqa!r}, "
            f"unsafe_fixes={self.unsafe_fixes!r}, prefilter={self.prefilter!r}, "
            f"ignored={sorted(self.ignored)!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # Workers resolve registered rules by code themselves.
        state = {name: getattr(self, name) for name in self.__slots__}
        state["_filter_rules"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
