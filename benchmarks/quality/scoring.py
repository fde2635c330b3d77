"""Scoring findings against the manifest, as the corpus README's Scoring section says.

A finding matches an item when its code is one of the item's codes and its line is within
``WINDOW`` lines of one of the item's lines; each item and each finding is used at most once.
Ambiguous rows are scored apart and never enter the overall numbers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from benchmarks.quality.linter import Finding
from benchmarks.quality.manifest import Item, Row

WINDOW = 3


def matches(finding: Finding, item: Item, window: int = WINDOW) -> bool:
    return finding.code in item.codes and any(abs(finding.line - n) <= window for n in item.lines)


def assign(findings: list[Finding], items: list[Item], window: int = WINDOW) -> dict[int, int]:
    """A one-to-one matching {item index: finding index}, closest lines first."""
    pairs = []
    for i, item in enumerate(items):
        for j, f in enumerate(findings):
            if matches(f, item, window):
                pairs.append((min(abs(f.line - n) for n in item.lines), i, j))
    used_i: dict[int, int] = {}
    used_j: set[int] = set()
    for _, i, j in sorted(pairs):
        if i not in used_i and j not in used_j:
            used_i[i] = j
            used_j.add(j)
    return used_i


@dataclass
class FileScore:
    row: Row
    findings: list[Finding]
    matched: list[tuple[Item, Finding]] = field(default_factory=list)
    missed: list[Item] = field(default_factory=list)
    acceptable: list[tuple[Item, Finding]] = field(default_factory=list)
    false_positives: list[Finding] = field(default_factory=list)


def score_file(row: Row, findings: list[Finding], window: int = WINDOW) -> FileScore:
    fs = FileScore(row, sorted(findings, key=lambda f: (f.line, f.code)))
    got = assign(fs.findings, row.expected, window)
    for i, item in enumerate(row.expected):
        if i in got:
            fs.matched.append((item, fs.findings[got[i]]))
        else:
            fs.missed.append(item)
    rest = [f for j, f in enumerate(fs.findings) if j not in set(got.values())]
    ok = assign(rest, row.acceptable, window)
    for i, j in ok.items():
        fs.acceptable.append((row.acceptable[i], rest[j]))
    fs.false_positives = [f for j, f in enumerate(rest) if j not in set(ok.values())]
    return fs


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    missed: int = 0
    acceptable: int = 0

    @property
    def findings(self) -> int:
        return self.tp + self.fp + self.acceptable

    @property
    def precision(self) -> float | None:
        """Matched (expected or acceptable) findings over all findings."""
        n = self.findings
        return (self.tp + self.acceptable) / n if n else None

    @property
    def recall(self) -> float | None:
        n = self.tp + self.missed
        return self.tp / n if n else None


@dataclass
class Score:
    files: list[FileScore]
    ambiguous: list[FileScore]
    missing_files: list[Row] = field(default_factory=list)

    def overall(self) -> Counts:
        c = Counts()
        for fs in self.files:
            c.tp += len(fs.matched)
            c.missed += len(fs.missed)
            c.acceptable += len(fs.acceptable)
            c.fp += len(fs.false_positives)
        return c

    def per_rule(self) -> dict[str, Counts]:
        """Per code: a miss counts for the item's first code, a match for the finding's."""
        out: dict[str, Counts] = {}
        for fs in self.files:
            for _, f in fs.matched:
                out.setdefault(f.code, Counts()).tp += 1
            for item in fs.missed:
                out.setdefault(item.codes[0], Counts()).missed += 1
            for _, f in fs.acceptable:
                out.setdefault(f.code, Counts()).acceptable += 1
            for f in fs.false_positives:
                out.setdefault(f.code, Counts()).fp += 1
        return dict(sorted(out.items()))

    def clean_files(self) -> tuple[int, int, int]:
        """(clean files, clean files with a false positive, false positives on them)."""
        clean = [fs for fs in self.files if fs.row.verdict == "clean"]
        return (
            len(clean),
            sum(1 for fs in clean if fs.false_positives),
            sum(len(fs.false_positives) for fs in clean),
        )

    def buggy_files(self) -> tuple[int, int]:
        """(buggy files, buggy files with at least one expected item matched)."""
        buggy = [fs for fs in self.files if fs.row.verdict == "buggy"]
        return len(buggy), sum(1 for fs in buggy if fs.matched)

    def codes_reported(self) -> Counter:
        return Counter(f.code for fs in self.files for f in fs.findings)


def score(rows: list[Row], findings: list[Finding], present: set[str] | None = None) -> Score:
    """Score every row; ``present`` names the files that exist (others are listed apart)."""
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.file, []).append(f)
    result = Score([], [])
    for row in rows:
        if present is not None and row.key not in present:
            result.missing_files.append(row)
            continue
        fs = score_file(row, by_file.get(row.key, []))
        (result.ambiguous if row.ambiguous else result.files).append(fs)
    return result
