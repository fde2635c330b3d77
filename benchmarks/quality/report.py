"""results.md and the console summary: numbers, targets, every miss and false positive."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from benchmarks.quality.ledger import Review, format_row
from benchmarks.quality.mutation import EngineError, MutantResult
from benchmarks.quality.operators import OPERATORS
from benchmarks.quality.scoring import Counts, Score

TARGET_PRECISION = 0.98
TARGET_MUTANT_RECALL = 0.90
TARGET_BUG_RECALL = 0.75
FAMILIES = {
    "EMA1": ("decay (EMA1xx)"),
    "EMA2": ("placement and use (EMA2xx)"),
    "EMA3": ("hand-written updates (EMA3xx)"),
    "EMA4": ("SWA (EMA4xx)"),
}

# Why a target is missed: the capability each rule family lacks, from reading the misses.
WHY = {
    "real-bug recall": (
        "the corpus's expected findings need cross-file evidence (a local ModelEma class that "
        "does not unwrap, a builder that casts to bf16), dtype and aliasing flow across "
        "statements (`state_dict()` references, `.half()` copies), Lightning "
        "manual-optimization order, and no-op rebinding of the initial sync; see the misses"
    ),
}


# The framework of a mutated file, from its imports: targets hold "on PyTorch and JAX files
# alike", so the recall of each operator is also shown per framework.
_FRAMEWORK_IMPORTS = (
    ("JAX", re.compile(r"^\s*(?:import|from)\s+(?:jax|flax|haiku|optax|equinox)\b", re.M)),
    ("TensorFlow", re.compile(r"^\s*(?:import|from)\s+(?:tensorflow|keras|tf_keras)\b", re.M)),
)


def framework(code: str) -> str:
    """ "JAX", "TensorFlow" or "PyTorch" (the rest) for a file's source."""
    for name, pattern in _FRAMEWORK_IMPORTS:
        if pattern.search(code):
            return name
    return "PyTorch"


def fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def ratio(a: int, b: int) -> str:
    return f"{a}/{b} = {a / b:.2f}" if b else f"{a}/0"


@dataclass
class Run:
    version: str
    command: str
    score: Score
    corpus_review: Review
    eco_review: Review | None
    eco_packages: int
    mutants: list[MutantResult] = field(default_factory=list)
    mutant_files: int = 0
    engine_errors: list[EngineError] = field(default_factory=list)
    lint_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def mutant_recall(self, key) -> dict[str, tuple[int, int]]:
        out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r in self.mutants:
            for k in key(r):
                out[k][1] += 1
                out[k][0] += r.detected is not None
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    def per_operator(self) -> dict[str, tuple[int, int]]:
        got = self.mutant_recall(lambda r: [r.mutant.operator])
        return {op.name: got.get(op.name, (0, 0)) for op in OPERATORS}

    def per_rule(self) -> dict[str, tuple[int, int]]:
        return self.mutant_recall(lambda r: [r.mutant.codes[0]])

    def per_family(self) -> dict[str, tuple[int, int]]:
        return self.mutant_recall(lambda r: [FAMILIES[r.mutant.codes[0][:4]]])

    def per_framework(self) -> dict[str, tuple[int, int]]:
        """Recall by ``operator framework`` (the framework the mutated file imports)."""
        return self.mutant_recall(lambda r: [f"{r.mutant.operator} {framework(r.mutant.code)}"])


def _counts_row(name: str, c: Counts) -> str:
    return (
        f"| {name} | {c.tp} | {c.acceptable} | {c.fp} | {c.missed} | "
        f"{fmt(c.precision)} | {fmt(c.recall)} |"
    )


def targets(run: Run) -> list[str]:
    lines = []
    overall = run.score.overall()
    ledger_t, ledger_f = run.corpus_review.counts()
    if run.eco_review:
        et, ef = run.eco_review.counts()
        ledger_t, ledger_f = ledger_t + et, ledger_f + ef
    prec = ledger_t / (ledger_t + ledger_f) if ledger_t + ledger_f else None
    reviews = [run.corpus_review] + ([run.eco_review] if run.eco_review else [])
    false = [(f.code, e) for r in reviews for f, e in r.reviewed if e.verdict == "false"]
    by_code = Counter(code for code, _ in false)
    reasons = {}
    for code, e in false:
        reasons.setdefault(code, e.reason)
    lines.append(
        _target(
            "precision on real code (ledger)",
            prec,
            TARGET_PRECISION,
            f"{ledger_f} reviewed finding(s) are false: "
            + "; ".join(f"{c} x{n} (e.g. {reasons[c]})" for c, n in sorted(by_code.items())),
        )
    )
    lines.append(
        _target(
            "real-bug recall (corpus)", overall.recall, TARGET_BUG_RECALL, WHY["real-bug recall"]
        )
    )
    for name, (hit, n) in run.per_operator().items():
        if n == 0:
            lines.append(
                f"- MISS mutant recall `{name}`: no site in the files mutated (the "
                "operator found no place for its bug)"
            )
            continue
        why = _operator_why(run, name)
        if n < 5:
            why += f" (only {n} mutant(s): the files mutated offer few places for this bug)"
        lines.append(
            _target(
                f"mutant recall `{name}`", hit / n, TARGET_MUTANT_RECALL, why, detail=f"{hit}/{n}"
            )
        )
    return lines


def _target(name: str, value: float | None, target: float, why: str, detail: str = "") -> str:
    if value is None:
        return f"- n/a {name}: nothing to measure"
    d = f" ({detail})" if detail else ""
    if value >= target:
        return f"- PASS {name}: {value:.2f}{d} >= {target:.2f}"
    return f"- MISS {name}: {value:.2f}{d}, {target - value:.2f} below {target:.2f}. Why: {why}"


OPERATOR_WHY = {
    "decay-0.9": (
        "decay settings the rule cannot tie to an evaluation EMA (function defaults, "
        "config values read elsewhere, teachers and RL targets it classifies differently)"
    ),
    "decay-1.0": (
        "the value does not reach the rule through the path the mutant uses (defaults of "
        "the file's own functions, attributes set in __init__)"
    ),
    "decay-0.99999": (
        "no resolvable run length, so a long horizon cannot be judged; ramps make the "
        "value a ceiling"
    ),
    "momentum-one-minus": (
        "the semantics of the API the value goes to (D vs M) is not resolved for that call"
    ),
    "update-outside-accumulation": (
        "the guard or the loop is not recognised as gradient accumulation (accumulate() "
        "blocks, sync_gradients guards in other shapes)"
    ),
    "update-before-step": (
        "the update or the step is not recognised in that shape (closures, hooks, scaler steps)"
    ),
    "eval-removed": (
        "evaluation sites of the copy are not followed (passed to a function defined "
        "elsewhere, cross-file evidence)"
    ),
    "copy-on-cpu": (
        "the training device is not established in the file, or the copy is not "
        "recognised as an averaged copy"
    ),
    "copy-to-cpu": (
        "the training device is not established in the file, or the copy is not "
        "recognised as an averaged copy"
    ),
    "copy-of-ddp": (
        "the wrapper is not followed through the name (model_without_ddp-style aliases, "
        "wraps in another function)"
    ),
    "out-of-place": (
        "the rebinding of a loop variable is not recognised as a discarded update in that shape"
    ),
    "coefficients-swapped": ("the shadow side is not identified in that shape of update"),
    "no-grad-removed": (
        "the grad mode at the update is not established (callers in other functions or files)"
    ),
    "update-bn-removed": (
        "the SWA model's use or its BatchNorm layers are not established in the file"
    ),
    "swa-start-zero": ("the start value does not reach the rule (argparse or config indirection)"),
    "swalr-removed": ("the scheduler that keeps stepping is not tied to the averaging loop"),
}


def _operator_why(run: Run, name: str) -> str:
    wrong = Counter(
        f.code
        for r in run.mutants
        if r.mutant.operator == name and r.detected is None
        for f in r.wrong_code_nearby
    )
    extra = (
        (
            "; near the expected line it reported "
            f"{', '.join(f'{c} x{n}' for c, n in wrong.most_common(3))} instead"
        )
        if wrong
        else ""
    )
    return OPERATOR_WHY.get(name, "") + extra


def markdown(run: Run) -> str:
    s = run.score
    o = s.overall()
    nclean, clean_fp_files, clean_fp = s.clean_files()
    nbuggy, buggy_hit = s.buggy_files()
    out = [
        "# Quality benchmark: labelled real files, mutants, the ledger",
        "",
        f"ema-lint {run.version}; `{run.command}`; {run.seconds / 60:.1f} min.",
        (
            "Generated by `python -m benchmarks.quality` (see benchmarks/README.md). Scoring "
            "as in the corpus README:"
        ),
        (
            "a finding matches an expected item when its code is one of the item's codes and "
            "its line is within 3 lines;"
        ),
        (
            "`Acceptable:` items are neither required nor counted against precision; "
            "`[ambiguous]` rows are scored apart."
        ),
        "",
        "## Headline",
        "",
        "| measure | value |",
        "|---|---|",
        (
            "| corpus precision (matched / all findings, non-ambiguous rows) | "
            f"{ratio(o.tp + o.acceptable, o.findings)} |"
        ),
        f"| real-bug recall (expected items matched) | {ratio(o.tp, o.tp + o.missed)} |",
        f"| buggy files with at least one match | {buggy_hit}/{nbuggy} |",
        (
            f"| clean files with a false positive | {clean_fp_files}/{nclean} ({clean_fp} "
            "finding(s)) |"
        ),
    ]
    ct, cf = run.corpus_review.counts()
    out.append(
        f"| ledger precision, corpus | {ratio(ct, ct + cf)} "
        f"({len(run.corpus_review.unreviewed)} unreviewed) |"
    )
    if run.eco_review is not None:
        et, ef = run.eco_review.counts()
        out.append(
            f"| ledger precision, ecosystem ({run.eco_packages} packages) | "
            f"{ratio(et, et + ef)} ({len(run.eco_review.unreviewed)} unreviewed) |"
        )
        out.append(f"| ledger precision, all real code | {ratio(ct + et, ct + et + cf + ef)} |")
    det = sum(1 for r in run.mutants if r.detected is not None)
    out.append(
        f"| mutant recall (all operators) | {ratio(det, len(run.mutants))} over "
        f"{run.mutant_files} files |"
    )
    out.append(f"| mutants that do not parse (engine bugs) | {len(run.engine_errors)} |")
    out += ["", "## Targets", "", *targets(run)]
    out += [
        "",
        "## Corpus per rule",
        "",
        "| rule | TP | acceptable | FP | missed | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for code, c in s.per_rule().items():
        out.append(_counts_row(code, c))
    out.append(_counts_row("**all**", o))
    out += ["", "## Misses (expected findings not reported)", ""]
    for fs in s.files:
        for item in fs.missed:
            out.append(f"- `{fs.row.key}` {item.label()}: {item.text[:160]}")
    out += ["", "## False positives on the corpus", ""]
    for fs in s.files:
        for f in fs.false_positives:
            out.append(f"- `{fs.row.key}:{f.line}` {f.code} `{f.anchor[:90]}`")
    out += ["", "## Ambiguous rows (not in the numbers)", ""]
    for fs in s.ambiguous:
        got = ", ".join(f"L{f.line} {f.code}" for f in fs.findings) or "no findings"
        exp = "; ".join(i.label() for i in fs.row.expected)
        out.append(f"- `{fs.row.key}`: expected {exp}; matched {len(fs.matched)}; reported {got}")
    if s.missing_files:
        out += ["", "## Rows whose file is missing from the extracted folder", ""]
        out += [f"- `{r.key}`" for r in s.missing_files]
    out += [
        "",
        "## Mutants",
        "",
        (
            "Recall per operator (a mutant is found when a counting code is reported within "
            "3 lines of an"
        ),
        "expected line and its original file did not have that finding):",
        "",
        "| operator | codes | found / mutants | recall | new findings elsewhere |",
        "|---|---|---:|---:|---:|",
    ]
    newf = Counter()
    for r in run.mutants:
        newf[r.mutant.operator] += len(r.new_findings)
    for op in OPERATORS:
        hit, n = run.per_operator()[op.name]
        out.append(
            f"| `{op.name}` ({op.summary}) | {'/'.join(op.codes)} | {hit}/{n} | "
            f"{fmt(hit / n if n else None)} | {newf[op.name]} |"
        )
    out += [
        "",
        "Per rule (the operator's first code):",
        "",
        "| rule | found / mutants | recall |",
        "|---|---:|---:|",
    ]
    for code, (hit, n) in run.per_rule().items():
        out.append(f"| {code} | {hit}/{n} | {fmt(hit / n)} |")
    out += ["", "Per rule family:", "", "| family | found / mutants | recall |", "|---|---:|---:|"]
    for fam, (hit, n) in run.per_family().items():
        out.append(f"| {fam} | {hit}/{n} | {fmt(hit / n)} |")
    out += [
        "",
        "Per operator and framework (from the mutated file's imports):",
        "",
        "| operator | framework | found / mutants | recall |",
        "|---|---|---:|---:|",
    ]
    for key, (hit, n) in run.per_framework().items():
        op, _, fw = key.rpartition(" ")
        out.append(f"| `{op}` | {fw} | {hit}/{n} | {fmt(hit / n)} |")
    out += ["", "### Mutants not found", ""]
    for r in run.mutants:
        if r.detected is None:
            m = r.mutant
            near = ", ".join(f"L{f.line} {f.code}" for f in r.wrong_code_nearby)
            out.append(
                (
                    f"- `{m.operator}` `{m.source_file}` L{'/'.join(map(str, m.lines))}: "
                    f"{m.description}"
                )
                + (f" (reported nearby: {near})" if near else "")
            )
    out += [
        "",
        "### New findings a mutant gets that its original did not (beyond the expected one)",
        "",
    ]
    for r in run.mutants:
        for f in r.new_findings:
            out.append(
                f"- `{r.mutant.operator}` `{r.mutant.source_file}` L{f.line} {f.code} "
                f"`{f.anchor[:80]}`"
            )
    if run.engine_errors:
        out += ["", "### Engine errors (mutants that do not parse, operators that crashed)", ""]
        out += [
            f"- `{e.operator}` `{e.source_file}`: {e.description}: {e.error}"
            for e in run.engine_errors
        ]
    out += ["", "## Findings not in the ledger", ""]
    un = [("corpus", f) for f in run.corpus_review.unreviewed]
    if run.eco_review:
        un += [("ecosystem", f) for f in run.eco_review.unreviewed]
    out += [f"- `{format_row(src, f)}`" for src, f in un] or ["none"]
    stale = [("corpus", e) for e in run.corpus_review.stale]
    if run.eco_review:
        stale += [("ecosystem", e) for e in run.eco_review.stale]
    if stale:
        out += ["", "## Ledger rows no finding matches any more (delete or re-anchor them)", ""]
        out += [f"- `{src}` `{e.file}:{e.line}` {e.code} `{e.anchor[:80]}`" for src, e in stale]
    if run.lint_errors:
        out += ["", "## ema-lint errors", ""] + [f"- {e}" for e in run.lint_errors]
    return "\n".join(out) + "\n"
