"""``python -m benchmarks.quality MANIFEST FOLDER``: the whole quality benchmark, one command.

1. lints every manifest row's file in FOLDER (``owner__name/path``) and scores it;
2. lints the ecosystem packages of scripts/corpus.py (downloaded once into the cache);
3. reviews every finding against the ledger (unreviewed ones are listed; ``--new-findings``
   prints them as ledger rows to paste and judge);
4. mutates every clean corpus file and the ecosystem files that mention averaging most,
   lints the mutants and scores them per operator, rule and family;
5. writes benchmarks/quality/results.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.quality import ecosystem, ledger, linter, manifest, mutation, report, scoring
from benchmarks.quality.operators import OPERATORS, by_name

HERE = Path(__file__).resolve().parent
DEFAULT_LEDGER = HERE / "ledger.tsv"
DEFAULT_OUTPUT = HERE / "results.md"


def _version(command: list[str]) -> str:
    try:
        out = subprocess.run(
            [*command, "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().split()[-1] if out.strip() else "unknown"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# A project with more Python files than this is linted without its other files (bounded cost).
MAX_PROJECT_FILES = 400


def _project_files(key: str, path: Path) -> list[tuple[str, Path]]:
    """The other files of the project ``path`` belongs to, as (key, path): the folder the
    key's first part names (``owner__repo/``, an ecosystem package). A mutant is linted
    among them, as the real file is: its helpers, classes and callers in other modules
    are what the project model reads."""
    parts = Path(key).parts
    if len(parts) < 2:
        return []
    root = path.parents[len(parts) - 2]
    top = parts[0]
    found = []
    for other in sorted(root.rglob("*.py")):
        if other == path or not other.is_file():
            continue
        found.append((f"{top}/{other.relative_to(root).as_posix()}", other))
        if len(found) > MAX_PROJECT_FILES:
            return []
    return found


def _mark_root(folder: Path) -> None:
    """A repository's root folder (``owner__repo/``, not a package itself) gets the project
    marker its checkout has (``.git``; the extracted corpus keeps none): imports of the
    repository's own modules (``from models.ema import EMAHelper`` in ``runners/``) resolve
    from it, as when the code runs from the checkout."""
    if folder.is_dir() and not (folder / "__init__.py").exists():
        marker = folder / "setup.cfg"
        if not marker.exists():
            marker.write_text("")


def _link(dest: Path, source: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        dest.symlink_to(source.resolve())
    except OSError:
        dest.write_bytes(source.read_bytes())


class _Texts:
    """The texts of a project's other files, read once and only when iterated."""

    def __init__(self, key: str, path: Path) -> None:
        self.key, self.path = key, path
        self.texts: list[str] | None = None

    def __iter__(self):
        if self.texts is None:
            self.texts = []
            for _, path in _project_files(self.key, self.path):
                try:
                    self.texts.append(path.read_text(encoding="utf-8", errors="replace"))
                except OSError:
                    continue
        return iter(self.texts)


def run_mutants(
    files: list[tuple[str, Path]],
    originals: dict[str, list[linter.Finding]] | None,
    command: list[str],
    max_sites: int,
    errors: list[str],
    operators: tuple[str, ...] = (),
) -> tuple[list[mutation.MutantResult], list[mutation.EngineError]]:
    """Mutate ``files`` (key, path), lint originals and mutants, judge each mutant."""
    engine_errors: list[mutation.EngineError] = []
    mutants: list[mutation.Mutant] = []
    for key, path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        ops = [by_name(o) for o in operators] if operators else OPERATORS
        mutants += mutation.mutants_of(
            key,
            source,
            ops,
            max_sites=max_sites,
            errors=engine_errors,
            project_texts=_Texts(key, path),
        )
    for i, m in enumerate(mutants):
        m.index = i
    _log(f"  {len(mutants)} mutants of {len(files)} files; linting them")
    with tempfile.TemporaryDirectory(prefix="ema-lint-mutants-") as tmp:
        root = Path(tmp)
        orig_paths = []
        siblings = {key: _project_files(key, path) for key, path in files}
        for key, path in files:
            dest = root / "orig" / key
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())
            orig_paths.append(dest)
        for key, _ in files:
            for other_key, other in siblings[key]:
                if not (root / "orig" / other_key).exists():
                    _link(root / "orig" / other_key, other)
            if len(Path(key).parts) > 1:
                _mark_root(root / "orig" / Path(key).parts[0])
        paths = []
        for m in mutants:
            dest = root / "mut" / m.key
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(m.code, encoding="utf-8")
            paths.append(dest)
            # The mutant among the other files of its project (``mNNNNN/owner__repo/...``).
            base = dest.parents[len(Path(m.source_file).parts) - 1]
            for other_key, other in siblings.get(m.source_file, []):
                _link(base / other_key, other)
            if len(Path(m.source_file).parts) > 1:
                _mark_root(base / Path(m.source_file).parts[0])
        before: dict[str, list[linter.Finding]] = {}
        for f in linter.run(orig_paths, [(root / "orig", "")], command, errors):
            before.setdefault(f.file, []).append(f)
        after: dict[str, list[linter.Finding]] = {}
        for f in linter.run(paths, [(root / "mut", "")], command, errors):
            after.setdefault(f.file, []).append(f)
    results = [
        mutation.judge(m, after.get(m.key, []), before.get(m.source_file, [])) for m in mutants
    ]
    return results, engine_errors


def _command_line(argv: list[str], args: argparse.Namespace) -> str:
    """The command as results.md shows it: machine paths replaced by what they stand for."""
    names = {str(args.manifest): "MANIFEST", str(args.folder): "FOLDER", str(args.output): "OUTPUT"}
    shown = [names.get(a, "PATH" if a.startswith("/") else a) for a in argv]
    return " ".join(["python -m benchmarks.quality", *shown])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.quality", description=__doc__.splitlines()[0]
    )
    ap.add_argument("manifest", type=Path, help="manifest TSV in the corpus format")
    ap.add_argument("folder", type=Path, help="the extracted corpus (owner__name/<path>)")
    ap.add_argument("--ledger", type=Path, default=DEFAULT_LEDGER)
    ap.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="results file (default: %(default)s)"
    )
    ap.add_argument("--no-write", action="store_true", help="print only, write no results file")
    ap.add_argument(
        "--ema-lint", help="the ema-lint command (default: python -m ema_lint, else ema-lint)"
    )
    ap.add_argument("--no-ecosystem", action="store_true", help="skip the ecosystem packages")
    ap.add_argument(
        "--cache-dir", type=Path, help="ecosystem package cache (see scripts/corpus.py)"
    )
    ap.add_argument(
        "--ecosystem-files",
        type=int,
        default=80,
        help="ecosystem files to mutate (default: %(default)s)",
    )
    ap.add_argument("--no-mutants", action="store_true", help="skip the mutation part")
    ap.add_argument(
        "--max-sites", type=int, default=mutation.MAX_SITES, help="mutants per operator per file"
    )
    ap.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="GLOB",
        help="mutate only files whose key matches GLOB (repeatable); implies --no-write",
    )
    ap.add_argument(
        "--operator",
        action="append",
        default=[],
        metavar="NAME",
        help="apply only this mutation operator (repeatable); implies --no-write",
    )
    ap.add_argument(
        "--new-findings",
        action="store_true",
        help="print the findings not in the ledger, as ledger rows",
    )
    args = ap.parse_args(argv)
    if args.only or args.operator:
        args.no_write = True  # a partial run must not overwrite the full results

    t0 = time.monotonic()
    command = linter.parse_command(args.ema_lint)
    errors: list[str] = []
    rows = manifest.load(args.manifest)
    folder = args.folder.resolve()
    present = {r.key for r in rows if (folder / r.key).is_file()}
    _log(f"corpus: {len(present)} of {len(rows)} files present; linting")
    corpus_findings = linter.run(
        [folder / k for k in sorted(present)], [(folder, "")], command, errors
    )
    score = scoring.score(rows, corpus_findings, present)
    entries = ledger.load(args.ledger)
    corpus_review = ledger.review("corpus", corpus_findings, entries)

    eco_review = None
    eco_roots: list[tuple[str, Path]] = []
    if not args.no_ecosystem:
        _log("ecosystem: fetching (once) and linting the packages")
        eco_roots = ecosystem.package_dirs(args.cache_dir)
        eco_findings = linter.run(
            [p for _, p in eco_roots], [(p, k + "/") for k, p in eco_roots], command, errors
        )
        eco_review = ledger.review("ecosystem", eco_findings, entries)

    results: list[mutation.MutantResult] = []
    engine_errors: list[mutation.EngineError] = []
    files: list[tuple[str, Path]] = []
    if not args.no_mutants:
        files = [
            (r.key, folder / r.key)
            for r in rows
            if r.verdict == "clean" and r.key in present and r.key.endswith(".py")
        ]
        if eco_roots:
            files += ecosystem.averaging_files(eco_roots, args.ecosystem_files)
        if args.only:
            files = [f for f in files if any(fnmatch.fnmatch(f[0], g) for g in args.only)]
        _log(f"mutants: mutating {len(files)} files")
        results, engine_errors = run_mutants(
            files, None, command, args.max_sites, errors, tuple(args.operator)
        )

    run = report.Run(
        version=_version(command),
        command=_command_line(argv if argv is not None else sys.argv[1:], args),
        score=score,
        corpus_review=corpus_review,
        eco_review=eco_review,
        eco_packages=len(eco_roots),
        mutants=results,
        mutant_files=len(files),
        engine_errors=engine_errors,
        lint_errors=errors,
        seconds=time.monotonic() - t0,
    )
    text = report.markdown(run)
    if not args.no_write:
        args.output.write_text(text, encoding="utf-8")
        _log(f"wrote {args.output}")
    summary = text.split("## Corpus per rule")[0]
    print(summary)
    if args.only or args.operator:
        # A partial run is for iterating on a rule: show which mutants it still misses.
        mutants = text.partition("\n## Mutants\n")[2].partition("\n## ")[0]
        print("## Mutants\n" + mutants)
    if args.new_findings:
        print(ledger.header())
        for f in corpus_review.unreviewed:
            print(ledger.format_row("corpus", f))
        for f in eco_review.unreviewed if eco_review else []:
            print(ledger.format_row("ecosystem", f))
    return 1 if engine_errors else 0
