"""The mutation engine: every operator at every place a file offers, one bug per mutant.

Each mutant records the lines where a finding is expected and the rule codes that count.
A mutant that does not parse is a bug of the engine (reported, never linted).
"""

from __future__ import annotations

import ast
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from benchmarks.quality.cst_tools import Context, apply
from benchmarks.quality.linter import Finding
from benchmarks.quality.operators import OPERATORS, PROJECT_TEXTS, Operator
from benchmarks.quality.scoring import WINDOW

MAX_SITES = 4


@dataclass
class Mutant:
    source_file: str
    operator: str
    codes: tuple[str, ...]
    lines: tuple[int, ...]
    description: str
    code: str
    index: int = 0

    @property
    def key(self) -> str:
        """Its own file name, keeping the original's name and suffix."""
        p = Path(self.source_file)
        return f"m{self.index:05d}/{p.parent.as_posix()}/{p.name}"


@dataclass
class EngineError:
    source_file: str
    operator: str
    description: str
    error: str


def _parses(code: str) -> str | None:
    try:
        cst.parse_module(code)
    except Exception as exc:
        return f"libcst: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(code.removeprefix("\ufeff"))
        except SyntaxError as exc:
            return f"ast: {exc.msg} at line {exc.lineno}"
    return None


def mutants_of(
    name: str,
    source: str,
    operators: Iterable[Operator] = OPERATORS,
    max_sites: int = MAX_SITES,
    errors: list[EngineError] | None = None,
    project_texts: Iterable[str] = (),
) -> list[Mutant]:
    """Every mutant of one file (at most ``max_sites`` per operator). ``project_texts``: the
    other files of its project, read by operators that must know whether another module
    reaches what they mutate (a default every call here overrides)."""
    try:
        ctx = Context.parse(source)
    except Exception:
        return []
    ctx.cache[PROJECT_TEXTS] = project_texts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ast.parse(source.removeprefix("\ufeff"))  # a BOM is valid in a file, not in a str
        except SyntaxError:
            return []
    out: list[Mutant] = []
    for op in operators:
        seen: set[str] = set()
        try:
            sites = list(op.find(ctx))
        except Exception as exc:
            if errors is not None:
                errors.append(
                    EngineError(name, op.name, "finding sites", f"{type(exc).__name__}: {exc}")
                )
            continue
        for site in sites:
            if len(seen) >= max_sites:
                break
            try:
                code, lines = apply(ctx, site.edit)
            except Exception as exc:
                if errors is not None:
                    errors.append(
                        EngineError(name, op.name, site.description, f"{type(exc).__name__}: {exc}")
                    )
                continue
            if code == source or code in seen:
                continue
            problem = _parses(code)
            if problem is None and not lines:
                problem = "no expected line"
            if problem is not None:
                if errors is not None:
                    errors.append(EngineError(name, op.name, site.description, problem))
                continue
            seen.add(code)
            out.append(Mutant(name, op.name, op.codes, tuple(lines), site.description, code))
    return out


def anchor_counts(findings: Iterable[Finding]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for f in findings:
        counts[(f.code, f.anchor)] = counts.get((f.code, f.anchor), 0) + 1
    return counts


@dataclass
class MutantResult:
    mutant: Mutant
    detected: Finding | None
    new_findings: list[Finding] = field(default_factory=list)
    wrong_code_nearby: list[Finding] = field(default_factory=list)


def judge(mutant: Mutant, findings: list[Finding], original: list[Finding]) -> MutantResult:
    """Detected: a finding with a counting code within the window of an expected line that
    its original did not have. New findings: the others the original did not have."""
    before = anchor_counts(original)
    fresh: list[Finding] = []
    for f in sorted(findings, key=lambda f: (f.line, f.code)):
        k = (f.code, f.anchor)
        if before.get(k, 0) > 0:
            before[k] -= 1
        else:
            fresh.append(f)
    hit = None
    for f in sorted(fresh, key=lambda f: min(abs(f.line - n) for n in mutant.lines)):
        if f.code in mutant.codes and any(abs(f.line - n) <= WINDOW for n in mutant.lines):
            hit = f
            break
    rest = [f for f in fresh if f is not hit]
    near = [f for f in rest if any(abs(f.line - n) <= WINDOW for n in mutant.lines)]
    return MutantResult(mutant, hit, rest, near if hit is None else [])
