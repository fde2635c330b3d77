"""Every rule, found by importing the modules of ``ema_lint.rules``, and selection by selector.

A selector is ``ALL``, a code (``EMA101``), a code prefix (``EMA1``, ``EMA``) or a rule name
(``ema-decay-out-of-range``); they are accepted wherever a code is.

Selection, lookups of metadata (``info``) and defaults read the rule manifest
(``ema_lint.manifest``), not the rule classes: only ``all_rules``, ``by_code``, ``by_name``
and ``lookup`` import the rules (and libcst), for the engine, the docs and ``explain``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .prefilter import PreFilter
    from .rule import Rule
    from .rule_info import RuleInfo

_CODE = re.compile(r"^EMA\d{3}$")


class UnknownSelector(ValueError):
    pass


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """All rules, ordered by code."""
    from . import rules as package
    from .rule import Rule

    found: dict[str, type[Rule]] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, Rule)
                and value is not Rule
                and value.code
                and value.__module__ == module.__name__
            ):
                if not _CODE.match(value.code):
                    raise RuntimeError(f"rule {value.__name__} has a malformed code {value.code!r}")
                other = found.get(value.code)
                if other is not None and other is not value:
                    raise RuntimeError(f"two rules share the code {value.code}")
                found[value.code] = value
    names = [r.name for r in found.values()]
    if len(names) != len(set(names)):
        raise RuntimeError("two rules share a name")
    return tuple(found[code] for code in sorted(found))


@cache
def by_code() -> dict[str, type[Rule]]:
    return {rule.code: rule for rule in all_rules()}


@cache
def by_name() -> dict[str, type[Rule]]:
    return {rule.name: rule for rule in all_rules()}


def lookup(code_or_name: str) -> type[Rule] | None:
    """A rule by its code or name (case-insensitive code)."""
    text = code_or_name.strip()
    return by_code().get(text.upper()) or by_name().get(text.lower())


def infos() -> tuple[RuleInfo, ...]:
    """The manifest entry of every rule, ordered by code (imports no rule)."""
    from ._manifest import RULES

    return RULES


@cache
def default_prefilter() -> PreFilter:
    """The pre-filter of the union over every registered rule: a superset of the filter of
    any run (built from the manifest: imports no rule). It lives here, not in
    ``prefilter``, so that the pre-filter needs neither the registry nor the manifest."""
    from .prefilter import PreFilter

    return PreFilter(infos())


_INDEX: tuple[tuple[RuleInfo, ...], dict[str, RuleInfo], dict[str, RuleInfo]] | None = None


def _index() -> tuple[dict[str, RuleInfo], dict[str, RuleInfo]]:
    global _INDEX
    entries = infos()
    if _INDEX is None or _INDEX[0] is not entries:
        _INDEX = (entries, {i.code: i for i in entries}, {i.name: i for i in entries})
    return _INDEX[1], _INDEX[2]


def info(code_or_name: str) -> RuleInfo | None:
    """A rule's manifest entry by its code or name (case-insensitive code)."""
    text = code_or_name.strip()
    codes, names = _index()
    return codes.get(text.upper()) or names.get(text.lower())


def expand(selector: str) -> set[str]:
    """The codes a selector stands for; raises UnknownSelector."""
    text = selector.strip()
    if not text:
        return set()
    codes, names = _index()
    if text.upper() == "ALL":
        return set(codes)
    entry = names.get(text.lower())
    if entry is not None:
        return {entry.code}
    upper = text.upper()
    if re.fullmatch(r"EMA\d{0,3}", upper):
        matched = {code for code in codes if code.startswith(upper)}
        if matched:
            return matched
    raise UnknownSelector(f"unknown rule selector {selector!r}")


def expand_all(selectors: Iterable[str]) -> set[str]:
    codes: set[str] = set()
    for selector in selectors:
        codes |= expand(selector)
    return codes


def default_codes() -> set[str]:
    return {entry.code for entry in infos() if entry.default_enabled}


def is_internal(code: str) -> bool:
    """ema-lint's own errors (EMA901-EMA903), not findings of a visitor. The EMA9xx range
    also holds rules about ema-lint's own comments (EMA910), which are visitors."""
    entry = info(code)
    if entry is not None:
        return entry.internal
    return code.startswith("EMA9")
