"""Reading the fixture cases in ``fixtures/``: the specification every rule is tested against."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ema_lint import engine
from ema_lint.config import Settings
from ema_lint.diagnostics import Applicability, Diagnostic

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
_EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z0-9:,\s]+?)\s*$")


@dataclass(frozen=True)
class Case:
    path: Path

    @property
    def id(self) -> str:
        return self.path.relative_to(FIXTURES).as_posix()

    @property
    def fixed_path(self) -> Path:
        return self.path.with_name(self.path.name[: -len(".py")] + ".fixed.py")

    @property
    def unsafe_path(self) -> Path:
        return self.path.with_name(self.path.name[: -len(".py")] + ".unsafe.py")

    @property
    def rule_code(self) -> str:
        return self.path.relative_to(FIXTURES).parts[0]

    def expected(self) -> Counter[tuple[str, int, int | None]]:
        """(code, line, column or None) of every expected finding."""
        found: Counter[tuple[str, int, int | None]] = Counter()
        text = self.path.read_bytes().decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), start=1):
            match = _EXPECT.search(line)
            if match is None:
                continue
            for item in match.group("codes").split(","):
                item = item.strip()
                if not item:
                    continue
                code, _, column = item.partition(":")
                found[(code, number, int(column) if column else None)] += 1
        return found


def is_case(path: Path) -> bool:
    name = path.name
    return (
        name.endswith(".py")
        and not name.endswith((".fixed.py", ".unsafe.py"))
        and not name.startswith("_")
    )


PROJECTS = FIXTURES / "projects"


def all_cases() -> list[Case]:
    """Single-file cases (the multi-file projects under ``projects/`` are ``all_projects``)."""
    return [
        Case(p)
        for p in sorted(FIXTURES.rglob("*.py"))
        if is_case(p) and not p.is_relative_to(PROJECTS)
    ]


@dataclass(frozen=True)
class ProjectCase:
    """``fixtures/projects/<name>/``: a small project whose files expect findings across
    files (the same ``# expect:`` comments), linted as a whole."""

    root: Path

    @property
    def id(self) -> str:
        return self.root.name

    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*.py") if is_case(p))

    def expected(self) -> Counter[tuple[str, str, int, int | None]]:
        """(file relative to the root, code, line, column or None) of every expectation."""
        found: Counter[tuple[str, str, int, int | None]] = Counter()
        for path in self.files():
            relative = path.relative_to(self.root).as_posix()
            for (code, line, column), count in Case(path).expected().items():
                found[(relative, code, line, column)] += count
        return found


def all_projects() -> list[ProjectCase]:
    return [ProjectCase(p) for p in sorted(PROJECTS.iterdir()) if p.is_dir()]


_SETTINGS = Settings()


def settings_for(path: Path, *, unsafe: bool = False) -> engine.FileSettings:
    base = _SETTINGS.for_file(path)
    if unsafe == base.unsafe_fixes:
        return base
    return engine.FileSettings(
        rules=base.rules,
        options=base.options,
        noqa=base.noqa,
        unsafe_fixes=unsafe,
        prefilter=base.prefilter,
        ignored=base.ignored,
    )


def lint_file(path: Path, data: bytes | None = None) -> list[Diagnostic]:
    raw = path.read_bytes() if data is None else data
    return engine.lint(raw, str(path), settings_for(path))


def fix_file(path: Path, *, unsafe: bool, data: bytes | None = None) -> engine.FixOutcome:
    raw = path.read_bytes() if data is None else data
    return engine.fix(raw, str(path), settings_for(path, unsafe=unsafe))


def matches(expected: Counter, found: list[Diagnostic]) -> tuple[list, list]:
    """(missing, unexpected) findings; a None column in an expectation matches any column."""
    remaining = list(found)
    missing = []
    for (code, line, column), count in sorted(expected.items(), key=str):
        for _ in range(count):
            for d in remaining:
                if d.code == code and d.line == line and (column is None or d.column == column):
                    remaining.remove(d)
                    break
            else:
                missing.append((code, line, column))
    unexpected = [(d.code, d.line, d.column, d.message) for d in remaining]
    return missing, unexpected


def fixable(diagnostics: list[Diagnostic], unsafe: bool) -> list[Diagnostic]:
    return [
        d
        for d in diagnostics
        if d.fix is not None and (unsafe or d.fix.applicability is Applicability.SAFE)
    ]
