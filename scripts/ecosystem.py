"""Ecosystem check: run ema-lint over real training libraries and compare with a baseline.

For every package of the ecosystem list in scripts/corpus.py (downloaded once into the
cache folder, see scripts/corpus.py) it:

1. runs ``ema-lint check --no-cache --exit-zero --output-format json PATH`` and counts
   the findings per rule and per package;
2. asserts there is no EMA90x finding (ema-lint's own errors: EMA901 a file it cannot
   parse, EMA902 a rule crashed, EMA903 a fix produced invalid code);
3. copies the package to a temporary folder, runs ``--fix --unsafe-fixes`` on the copy,
   checks that every changed file still parses with ``ast.parse`` and that a second
   ``--fix --unsafe-fixes`` changes nothing (idempotency).

The text it prints is stable (no timings, except on lines that start with ``#``, which
the comparison skips). ``--compare`` (the default) diffs it against
scripts/ecosystem-baseline.txt and exits 1 on any difference or failed check;
``--update-baseline`` rewrites the baseline.

It downloads the corpus on first use (about 7 minutes, once), so it runs only on
request, not in the test suite. A run takes about 6 minutes on 2 cores once the corpus
is cached.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus

BASELINE = Path(__file__).resolve().parent / "ecosystem-baseline.txt"
INTERNAL_PREFIX = "EMA90"
# The packages sit in a git-ignored cache folder: walk them whatever git ignores.
OPTIONAL_FLAGS = ("--no-cache", "--isolated", "--no-respect-gitignore")


# --- pure helpers (tested offline) ----------------------------------------------------


def comparable_lines(text: str) -> list[str]:
    """The lines the baseline comparison looks at: all but '#' comment lines."""
    return [line for line in text.splitlines() if not line.startswith("#")]


def baseline_diff(expected: str, actual: str) -> str:
    """A unified diff of the comparable lines; empty when they agree."""
    return "".join(
        line + "\n"
        for line in difflib.unified_diff(
            comparable_lines(expected),
            comparable_lines(actual),
            "baseline",
            "this run",
            lineterm="",
        )
    )


def relative_path(path: str, root: Path, cwd: Path) -> str:
    """A diagnostic's path relative to the package root, with '/' separators."""
    p = Path(path)
    if not p.is_absolute():
        p = cwd / p
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.as_posix()


def parses(source: bytes, name: str = "x.py") -> bool:
    """True if a Python file (or every code cell of a notebook) parses with ast.parse."""
    if name.endswith(".ipynb"):
        return notebook_parses(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes is no failure
        try:
            ast.parse(source)
        except (SyntaxError, ValueError):
            return False
    return True


def notebook_parses(source: bytes) -> bool:
    """A notebook is valid JSON and its code cells parse (IPython magics and shell lines
    are blanked first)."""
    try:
        cells = json.loads(source).get("cells", [])
    except (ValueError, AttributeError):
        return False
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        text = cell.get("source", "")
        text = "".join(text) if isinstance(text, list) else str(text)
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines()]
        if not parses("\n".join(lines).encode()):
            return False
    return True


SNAPSHOT_SUFFIXES = (".py", ".ipynb")


@dataclass
class PackageReport:
    name: str
    files: int = 0
    findings: list[tuple[str, int, int, str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # ema-lint's own error lines
    fixed_files: list[str] = field(default_factory=list)
    broken_by_fix: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)  # original fails ast.parse here
    not_idempotent: list[str] = field(default_factory=list)
    fix_errors: list[str] = field(default_factory=list)
    # Files that CPython cannot parse either: an EMA901 there is a right answer, not a bug.
    invalid_sources: set[str] = field(default_factory=set)

    @property
    def internal(self) -> list[tuple[str, int, int, str, str]]:
        return [
            f
            for f in self.findings
            if f[3].startswith(INTERNAL_PREFIX)
            and not (f[3] == "EMA901" and f[0] in self.invalid_sources)
        ]


def render(reports: Sequence[PackageReport]) -> list[str]:
    """The stable text report (no timings)."""
    out = [f"ema-lint ecosystem check over {len(reports)} packages"]
    per_rule: dict[str, Counter[str]] = defaultdict(Counter)
    out += ["", "== findings per package"]
    for r in reports:
        codes = Counter(f[3] for f in r.findings)
        detail = ", ".join(f"{c} {n}" for c, n in sorted(codes.items()))
        out.append(
            f"{r.name}: {r.files} .py files, {len(r.findings)} findings"
            + (f" ({detail})" if detail else "")
        )
        for c, n in codes.items():
            per_rule[c][r.name] += n
    out += ["", "== findings per rule"]
    if not per_rule:
        out.append("(none)")
    for code in sorted(per_rule):
        pkgs = per_rule[code]
        detail = ", ".join(f"{p} {n}" for p, n in sorted(pkgs.items()))
        out.append(f"{code}: {sum(pkgs.values())} ({detail})")
    out += ["", "== findings"]
    for r in reports:
        for path, line, col, code, message in sorted(r.findings):
            out.append(f"{r.name}/{path}:{line}:{col}: {code} {message}")
    out += ["", "== fixes (--fix --unsafe-fixes on a copy)"]
    for r in reports:
        out.append(
            f"{r.name}: {len(r.fixed_files)} files changed, {len(r.broken_by_fix)} do not parse"
            f" after the fix, {len(r.not_idempotent)} change again on a second run"
        )
        for path in r.fixed_files:
            out.append(f"  changed: {path}")
        for path in r.not_checked:
            out.append(f"  not checked (does not parse before the fix on this Python): {path}")
    failures = check_failures(reports)
    out += ["", "== checks"]
    out += [f"FAIL {line}" for line in failures] or ["all checks passed"]
    return out


def check_failures(reports: Iterable[PackageReport]) -> list[str]:
    fails = []
    for r in reports:
        for path, line, col, code, message in r.internal:
            fails.append(f"{r.name}/{path}:{line}:{col}: {code} {message}")
        fails += [f"{r.name}: ema-lint error: {e}" for e in r.errors + r.fix_errors]
        fails += [f"{r.name}/{p}: does not parse after --fix" for p in r.broken_by_fix]
        fails += [f"{r.name}/{p}: a second --fix changed it again" for p in r.not_idempotent]
    return fails


# --- running ema-lint -----------------------------------------------------------------


def find_ema_lint() -> list[str]:
    """How to call ema-lint: this interpreter's module, the PATH, or the benchmark venv."""
    probe = subprocess.run(
        [sys.executable, "-c", "import ema_lint.cli"], capture_output=True, text=True
    )
    if probe.returncode == 0:
        return [sys.executable, "-m", "ema_lint"]
    exe = shutil.which("ema-lint")
    if exe:
        return [exe]
    venv = corpus.default_cache_dir() / "venvs" / "ema-lint" / "bin" / "ema-lint"
    if venv.is_file():
        return [str(venv)]
    raise SystemExit("ema-lint not found: pip install -e . (or pass --ema-lint)")


def supported_flags(ema_lint: list[str]) -> list[str]:
    help_text = subprocess.run([*ema_lint, "check", "--help"], capture_output=True, text=True)
    return [f for f in OPTIONAL_FLAGS if f in help_text.stdout]


def run_json(ema_lint: list[str], args: list[str], cwd: Path) -> tuple[dict, str]:
    proc = subprocess.run(
        [*ema_lint, "check", *args, "--exit-zero", "--output-format", "json", "."],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    try:
        return json.loads(proc.stdout), ""
    except json.JSONDecodeError:
        return {}, f"exit {proc.returncode}, no JSON: {proc.stderr.strip()[-300:]}"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in corpus.iter_files(root, SNAPSHOT_SUFFIXES)
    }


def check_package(
    fetched: corpus.Fetched, ema_lint: list[str], flags: list[str], tmp: Path
) -> PackageReport:
    root = fetched.path
    report = PackageReport(fetched.package.key, files=sum(1 for _ in corpus.iter_files(root)))
    doc, err = run_json(ema_lint, flags, root)
    if err:
        report.errors.append(err)
    for d in doc.get("diagnostics", []):
        loc = d.get("location") or {}
        report.findings.append(
            (
                relative_path(d["path"], root, root),
                int(loc.get("line", 0)),
                int(loc.get("column", 0)),
                d["code"],
                d.get("message", "").replace("\n", " "),
            )
        )
    report.errors += [str(e) for e in doc.get("errors", [])]
    for path, _, _, code, _ in report.findings:
        if code == "EMA901" and not parses((root / path).read_bytes(), path):
            report.invalid_sources.add(path)

    copy = tmp / fetched.package.key
    shutil.copytree(root, copy)
    before = snapshot(copy)
    fix = [*flags, "--fix", "--unsafe-fixes"]
    doc, err = run_json(ema_lint, fix, copy)
    report.fix_errors += [err] if err else []
    report.fix_errors += [str(e) for e in doc.get("errors", [])]
    report.fix_errors += [
        f"{relative_path(d['path'], copy, copy)}: {d['code']} {d.get('message', '')}"
        for d in doc.get("diagnostics", [])
        if d["code"].startswith(INTERNAL_PREFIX) and d["code"] != "EMA901"
    ]
    after = snapshot(copy)
    for path, data in sorted(after.items()):
        if before.get(path) == data:
            continue
        report.fixed_files.append(path)
        if not parses(before.get(path, b""), path):
            report.not_checked.append(path)
        elif not parses(data, path):
            report.broken_by_fix.append(path)
    doc, err = run_json(ema_lint, fix, copy)
    report.fix_errors += [err] if err else []
    again = snapshot(copy)
    report.not_idempotent = sorted(p for p, data in again.items() if after.get(p) != data)
    shutil.rmtree(copy)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Run ema-lint over real training libraries (downloads them once) and "
        "compare the findings and fix checks with scripts/ecosystem-baseline.txt.",
        epilog="Runtime on 2 cores: about 6 minutes with the corpus cached, plus about 7"
        " minutes for the one-time download.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="store_true", help="diff against the baseline (default)")
    mode.add_argument("--update-baseline", action="store_true", help="rewrite the baseline")
    parser.add_argument("--cache-dir", type=Path, default=None, help="corpus cache folder")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="baseline file")
    parser.add_argument(
        "--packages", default=None, help="comma list of package names to check (default all)"
    )
    parser.add_argument(
        "--ema-lint", default=None, help="the ema-lint command (default: found automatically)"
    )
    args = parser.parse_args(argv)

    start = time.perf_counter()
    pkgs = corpus.packages_for(corpus.ECOSYSTEM)
    if args.packages:
        wanted = {corpus.normalize(p) for p in args.packages.split(",")}
        pkgs = [p for p in pkgs if corpus.normalize(p.name) in wanted]
    fetched = corpus.ensure(pkgs, args.cache_dir or corpus.default_cache_dir())
    ema_lint = args.ema_lint.split() if args.ema_lint else find_ema_lint()
    flags = supported_flags(ema_lint)
    version = subprocess.run([*ema_lint, "--version"], capture_output=True, text=True)

    reports = []
    with tempfile.TemporaryDirectory(prefix="ema-lint-ecosystem-") as tmp:
        for f in fetched:
            t0 = time.perf_counter()
            reports.append(check_package(f, ema_lint, flags, Path(tmp)))
            print(
                f"checked {f.package.key} in {time.perf_counter() - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    lines = render(reports)
    missing = [f for f in ("--no-cache",) if f not in flags]
    lines.append(f"# {version.stdout.strip() or 'ema-lint ?'}; flags: {' '.join(flags)}")
    if missing:
        lines.append(f"# ema-lint check has no {' '.join(missing)}: ran without")
    lines.append(f"# runtime: {time.perf_counter() - start:.0f} s")
    text = "\n".join(lines) + "\n"
    print(text, end="")

    failed = bool(check_failures(reports))
    if args.update_baseline:
        args.baseline.write_text(text)
        print(f"wrote {args.baseline}", file=sys.stderr)
        return 1 if failed else 0
    if not args.baseline.is_file():
        print(f"no baseline at {args.baseline}: run with --update-baseline", file=sys.stderr)
        return 1
    diff = baseline_diff(args.baseline.read_text(), text)
    if diff:
        print("\nDifferences from the baseline:\n" + diff, end="")
        return 1
    print("\nSame as the baseline.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
