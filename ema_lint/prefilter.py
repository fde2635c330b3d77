"""Skip files that cannot hold a finding before parsing them.

Each rule declares trigger tokens: byte strings at least one of which appears in any file
the rule can report on. The filter is the union of the enabled rules' triggers, searched
with plain substring tests (no regular expression), which costs a scan of the bytes: in a
real training library most files name no averaging API and are never parsed.
"""

from __future__ import annotations

from collections.abc import Iterable

from .rule import Rule


class PreFilter:
    """Union of the triggers of a set of rules."""

    def __init__(self, rules: Iterable[type[Rule]]) -> None:
        tokens: set[bytes] = set()
        self.accepts_all = False
        for rule in rules:
            if getattr(rule, "internal", False):
                continue
            if not rule.triggers:
                # A rule that cannot name its triggers must see every file.
                self.accepts_all = True
            tokens.update(rule.triggers)
        # A token that contains another is redundant: keep the shortest ones.
        ordered = sorted(tokens, key=len)
        kept: list[bytes] = []
        for token in ordered:
            if not any(k in token for k in kept):
                kept.append(token)
        self.tokens = tuple(kept)
        self._texts = tuple(t.decode("utf-8", "replace") for t in kept)

    def matches(self, data: bytes | str) -> bool:
        """True if the file may hold a finding and must be parsed."""
        if self.accepts_all:
            return True
        if isinstance(data, str):
            return any(t in data for t in self._texts)
        return any(t in data for t in self.tokens)
