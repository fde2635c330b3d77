"""The corpus manifest: rows, their verdict, and the expected and acceptable findings.

The format is described in the corpus README: ``notes`` is made of sentences that start
with a keyword (``Expect:``, ``Acceptable:``, ``Traps:`` ...); an item is
``L<n>[|L<m>]: EMAxxx[|EMAyyy] why``.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

KEYWORDS = (
    "Expect no findings.",
    "Expect:",
    "Acceptable:",
    "Traps:",
    "Out of scope:",
    "Provenance:",
)
_KEYWORD_RE = re.compile(
    r"(?:^|(?<=[\s.\]]))(Expect no findings\.|Expect:|Acceptable:|Traps:|Out of scope:|Provenance:)"
)
_ITEM_RE = re.compile(r"L(\d+(?:\|L\d+)*):\s*(EMA\d{3}(?:\|EMA\d{3})*)")


@dataclass(frozen=True)
class Item:
    """One expected (or acceptable) finding: any of ``codes`` at any of ``lines``."""

    lines: tuple[int, ...]
    codes: tuple[str, ...]
    text: str = ""

    def label(self) -> str:
        return "|".join(f"L{n}" for n in self.lines) + ": " + "|".join(self.codes)


@dataclass
class Row:
    repo: str
    commit: str
    path: str
    api: str
    verdict: str
    notes: str
    expected: list[Item] = field(default_factory=list)
    acceptable: list[Item] = field(default_factory=list)
    ambiguous: bool = False

    @property
    def key(self) -> str:
        """The file's name in the extracted folder: ``owner__name/path``."""
        return self.repo.replace("/", "__") + "/" + self.path

    @property
    def family(self) -> str:
        return self.api.split(":", 1)[0].strip()


def sections(notes: str) -> dict[str, str]:
    """The notes split by keyword: {'Expect:': text, 'Acceptable:': text, ...}."""
    out: dict[str, str] = {}
    marks = list(_KEYWORD_RE.finditer(notes))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(notes)
        out[m.group(1)] = (out.get(m.group(1), "") + " " + notes[m.end() : end]).strip()
    return out


def parse_items(text: str) -> list[Item]:
    """Every ``L<n>[|L<m>]: EMAxxx[|...]`` item of a section, with the text up to the next."""
    marks = list(_ITEM_RE.finditer(text))
    items = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        lines = tuple(int(x) for x in m.group(1).replace("L", "").split("|"))
        codes = tuple(m.group(2).split("|"))
        items.append(Item(lines, codes, text[m.end() : end].strip(" ;")))
    return items


def parse_row(fields: dict[str, str]) -> Row:
    notes = fields.get("notes", "") or ""
    row = Row(
        repo=fields["repo"],
        commit=fields.get("commit", ""),
        path=fields["path"],
        api=fields.get("api", ""),
        verdict=fields.get("verdict", "").strip(),
        notes=notes,
        ambiguous=notes.lstrip().startswith("[ambiguous]"),
    )
    parts = sections(notes)
    row.expected = parse_items(parts.get("Expect:", ""))
    row.acceptable = parse_items(parts.get("Acceptable:", ""))
    return row


def load(path: Path) -> list[Row]:
    """The rows of a manifest TSV (header: repo, commit, path, api, verdict, notes)."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [parse_row(r) for r in reader if r.get("repo")]
