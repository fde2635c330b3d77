"""The ledger: every finding ema-lint reports on real code, reviewed by hand.

One TSV row per finding: ``source`` (corpus / ecosystem), ``file``, ``code``, ``line`` (a
hint), ``anchor`` (the finding's source line, whitespace collapsed), ``verdict`` (true /
false) and a one-line ``reason``. A finding is keyed by (source, file, code, anchor), so
edits elsewhere in a file do not orphan its row; among rows with the same key the closest
line wins, and each row reviews one finding.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from benchmarks.quality.linter import Finding

COLUMNS = ("source", "file", "code", "line", "anchor", "verdict", "reason")
VERDICTS = ("true", "false")


@dataclass(frozen=True)
class Entry:
    source: str
    file: str
    code: str
    line: int
    anchor: str
    verdict: str
    reason: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.source, self.file, self.code, self.anchor)


def _clean(text: str) -> str:
    return " ".join(str(text).replace("\t", " ").split())


def load(path: Path) -> list[Entry]:
    if not path.exists():
        return []
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(
            (line for line in fh if not line.startswith("#")),
            delimiter="\t",
            quoting=csv.QUOTE_NONE,
        )
        out = []
        for r in reader:
            if not r.get("file"):
                continue
            out.append(
                Entry(
                    r["source"],
                    r["file"],
                    r["code"],
                    int(r.get("line") or 0),
                    r.get("anchor") or "",
                    (r.get("verdict") or "").strip().lower(),
                    r.get("reason") or "",
                )
            )
        return out


def format_row(source: str, f: Finding, verdict: str = "?", reason: str = "") -> str:
    return "\t".join(
        [source, f.file, f.code, str(f.line), _clean(f.anchor), verdict, _clean(reason)]
    )


def header() -> str:
    return "\t".join(COLUMNS)


def write(path: Path, entries: list[Entry]) -> None:
    lines = [header()]
    for e in sorted(entries, key=lambda e: (e.source, e.file, e.line, e.code)):
        lines.append(
            "\t".join(
                [
                    e.source,
                    e.file,
                    e.code,
                    str(e.line),
                    _clean(e.anchor),
                    e.verdict,
                    _clean(e.reason),
                ]
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@dataclass
class Review:
    reviewed: list[tuple[Finding, Entry]]
    unreviewed: list[Finding]
    stale: list[Entry]

    def counts(self) -> tuple[int, int]:
        """(true, false) among reviewed findings."""
        t = sum(1 for _, e in self.reviewed if e.verdict == "true")
        return t, sum(1 for _, e in self.reviewed if e.verdict == "false")

    @property
    def precision(self) -> float | None:
        t, f = self.counts()
        return t / (t + f) if t + f else None


def review(source: str, findings: list[Finding], entries: list[Entry]) -> Review:
    """Pair each finding with its ledger row (same key, closest line, each row once)."""
    pool: dict[tuple[str, str, str, str], list[Entry]] = {}
    for e in entries:
        if e.source == source:
            pool.setdefault(e.key, []).append(e)
    reviewed, unreviewed = [], []
    for f in sorted(findings, key=lambda f: (f.file, f.line, f.code)):
        cands = pool.get((source, f.file, f.code, _clean(f.anchor)), [])
        if not cands:
            unreviewed.append(f)
            continue
        best = min(cands, key=lambda e: abs(e.line - f.line))
        cands.remove(best)
        reviewed.append((f, best))
    stale = [e for rows in pool.values() for e in rows]
    return Review(reviewed, unreviewed, stale)
