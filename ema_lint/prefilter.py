"""Skip files that cannot hold a finding before parsing them.

Each rule declares trigger tokens: byte strings at least one of which appears in any file
the rule can report on. The filter is the union of the enabled rules' triggers, searched
with plain substring tests (no regular expression), which costs a scan of the bytes: in a
real training library most files name no averaging API and are never parsed. A rule may also
declare trigger groups, conjunctions of token sets (a file matches a group when it holds a
token of each set), for evidence that is common alone and rare together: the first set is
tested first, so it should be the cheaper and rarer one.
"""

from __future__ import annotations

from collections.abc import Iterable

from .rule import Rule


class PreFilter:
    """Union of the triggers of a set of rules."""

    def __init__(self, rules: Iterable[type[Rule]]) -> None:
        tokens: set[bytes] = set()
        groups: list[tuple[tuple[bytes, ...], ...]] = []
        self.accepts_all = False
        for rule in rules:
            if getattr(rule, "internal", False):
                continue
            trigger_groups = getattr(rule, "trigger_groups", ())
            if not rule.triggers and not trigger_groups:
                # A rule that cannot name its triggers must see every file.
                self.accepts_all = True
            tokens.update(rule.triggers)
            for group in trigger_groups:
                if group not in groups:
                    groups.append(group)
        # A token that contains another is redundant: keep the shortest ones.
        ordered = sorted(tokens, key=len)
        kept: list[bytes] = []
        for token in ordered:
            if not any(k in token for k in kept):
                kept.append(token)
        self.tokens = tuple(kept)
        self._texts = tuple(t.decode("utf-8", "replace") for t in kept)
        # A group with a set whose every token contains a kept token matches only files the
        # tokens already match: dropped.
        self.groups = tuple(
            g for g in groups if not any(all(any(k in t for k in kept) for t in alts) for alts in g)
        )
        self._text_groups = tuple(
            tuple(tuple(t.decode("utf-8", "replace") for t in alts) for alts in g)
            for g in self.groups
        )

    def matches(self, data: bytes | str) -> bool:
        """True if the file may hold a finding and must be parsed."""
        if self.accepts_all:
            return True
        if isinstance(data, str):
            if any(t in data for t in self._texts):
                return True
            groups: tuple = self._text_groups
        else:
            if any(t in data for t in self.tokens):
                return True
            groups = self.groups
        return any(all(any(t in data for t in alts) for alts in g) for g in groups)
