"""Suppression comments: ``# noqa``, ``# noqa: EMA101, EMA203`` and ``# ema-lint: noqa``.

The line forms follow flake8's syntax, so one comment serves both front ends. A finding is
suppressed by a comment on its own line or on the first line of the statement that holds it
(for findings inside a multi-line call). Rule names are accepted as well as codes; but
flake8 reads ``# noqa: ema-decay-out-of-range`` as a blanket ``# noqa`` (its syntax has
codes only) and hides every plugin's findings on that line, so names are best written
``# ema-lint: noqa: ema-decay-out-of-range``, a line form that flake8 never parses.
A comment line ``# ema-lint: noqa`` alone (no codes) suppresses the whole file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .positions import LineIndex

# flake8's own pattern, extended to accept kebab-case rule names.
_NOQA = re.compile(
    r"#\s*noqa\b(?::\s?(?P<codes>(?:[A-Za-z][A-Za-z0-9-]*[0-9A-Za-z](?:[,\s]+)?)+))?",
    re.IGNORECASE,
)
_FILE_NOQA = re.compile(r"#\s*ema-lint\s*:\s*noqa\b(?!\s*:)", re.IGNORECASE)
# ema-lint's own line form, invisible to flake8: ``# ema-lint: noqa: EMA101, rule-name``.
_OWN_NOQA = re.compile(
    r"#\s*ema-lint\s*:\s*noqa\s*:\s*(?P<codes>(?:[A-Za-z][A-Za-z0-9-]*[0-9A-Za-z](?:[,\s]+)?)+)",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"[,\s]+")


@dataclass(frozen=True)
class LineDirective:
    """``None`` codes means a blanket ``# noqa``."""

    codes: frozenset[str] | None


def file_is_suppressed(text: str) -> bool:
    """True if a comment line says ``# ema-lint: noqa``."""
    if "ema-lint" not in text:
        return False
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("#") and _FILE_NOQA.match(stripped):
            return True
    return False


def line_directive(line: str) -> LineDirective | None:
    if "noqa" not in line.lower():
        return None
    match = _NOQA.search(line) or _OWN_NOQA.search(line)
    if match is None:
        return None
    codes = match.group("codes")
    if not codes:
        return LineDirective(None)
    return LineDirective(frozenset(c.upper() for c in _SPLIT.split(codes.strip()) if c))


def directive_tokens(comment: str) -> tuple[int, int, list[str]] | None:
    """Where the code list of a ``# noqa: ...`` (or ``# ema-lint: noqa: ...``) directive sits
    in ``comment``, and its tokens as written; None for a blanket or no directive."""
    match = _NOQA.search(comment) or _OWN_NOQA.search(comment)
    if match is None or not match.group("codes"):
        return None
    codes = match.group("codes")
    stripped = codes.rstrip(", \t")
    tokens = [c for c in _SPLIT.split(stripped) if c]
    return match.start("codes"), match.start("codes") + len(stripped), tokens


class NoqaFilter:
    """Answers whether a finding is suppressed, caching each line's directive."""

    def __init__(self, lines: LineIndex) -> None:
        self.lines = lines
        self._cache: dict[int, LineDirective | None] = {}
        # (line, token) of each directive token that silenced a finding (for EMA910).
        self.used: set[tuple[int, str]] = set()

    def _directive(self, line: int) -> LineDirective | None:
        if line not in self._cache:
            self._cache[line] = line_directive(self.lines.line_text(line))
        return self._cache[line]

    def suppressed(self, code: str, name: str, line: int, statement_line: int | None) -> bool:
        found = False
        for candidate in sorted({line, statement_line or line}):
            directive = self._directive(candidate)
            if directive is None:
                continue
            if directive.codes is None:
                return True
            tokens = covering(directive.codes, code, name)
            if tokens:
                self.used.update((candidate, token) for token in tokens)
                found = True
        return found


def covering(tokens: frozenset[str], code: str, name: str) -> set[str]:
    """The tokens of a directive (upper case) that name ``code``: itself, the rule's name, or
    a prefix such as ``EMA1`` (which silences the whole family, as in flake8)."""
    code, name = code.upper(), name.upper()
    return {t for t in tokens if t in (code, name) or (t.startswith("EMA") and code.startswith(t))}
