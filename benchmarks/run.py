"""Benchmark ema-lint against other linters on a corpus of real training libraries.

One command on a fresh machine::

    python benchmarks/run.py             # full run, writes benchmarks/results.md
    python benchmarks/run.py --quick     # small subset, 1 repetition, prints only

It builds the corpus (scripts/corpus.py: pinned PyPI packages, downloaded once into
the cache folder), installs each tool on demand into its own virtual environment under
``<cache>/venvs/`` (TorchFix pins libcst<1.6, so every tool gets its own), then times
every tool as a child process: wall time (median and min over the repetitions) and
peak memory. See benchmarks/README.md for how to read the output.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent
sys.path.insert(0, str(REPO_ROOT / "scripts"))

import corpus  # noqa: E402

# Pinned versions of the tools compared (the ones measured in the shared linter reference).
FLAKE8 = "flake8==7.5.0"
RUFF = "ruff==0.17.6"
TORCHFIX = "torchfix==0.7.0"
FIXIT = "fixit==2.2.1"
LIBCST = "libcst==1.9.0"

DEFAULT_REPEAT = 3
SLOW_SECONDS = 150.0  # a tool whose first run takes longer is not repeated
# A run under a second (warm caches) is at the mercy of a busy moment of the machine: such
# runs are repeated more, in rounds of their own, each tool interleaved with the others.
QUICK_SECONDS = 1.0
QUICK_REPEAT = 7
# The flake8 rows compared by the 10% targets: two identical ``--select F`` rows differed by
# 10% over three runs each, as much as the targets' margin, so these take more.
FLAKE8_REPEAT = 5
SAMPLE_INTERVAL = 0.1  # seconds between samples of the child tree's RSS
QUICK_FILES_PER_PACKAGE = 3
QUICK_MAX_LINES = 400
OTHER = (".ipynb", ".yaml", ".yml")
SAMPLE_STEP = 20  # TorchFix and fixit lint every 20th file (they are ~100x slower)

GROUPS = ("ema-lint", "flake8", "libcst", "ruff", "torchfix", "fixit")


# --- measuring one child process ------------------------------------------------------


@dataclass
class Run:
    wall: float  # seconds
    cpu: float  # user + sys seconds of the child and its reaped descendants
    maxrss_mb: float  # largest RSS of any single process in the tree (wait4)
    tree_mb: float  # largest sampled sum of RSS over the tree
    returncode: int
    stderr_tail: str = ""

    @property
    def peak_mb(self) -> float:
        return max(self.maxrss_mb, self.tree_mb)


def _children(pid: int) -> list[int]:
    """Direct children of pid from /proc/PID/task/*/children (Linux)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out += [int(x) for x in fh.read().split()]
        except OSError:
            continue
    return out


def tree_rss_bytes(root: int) -> int:
    """Sum of RSS over root and all its descendants (Linux /proc), 0 if unavailable."""
    page = os.sysconf("SC_PAGE_SIZE")
    total, stack, seen = 0, [root], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/statm", "rb") as fh:
                total += int(fh.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
        stack.extend(_children(pid))
    return total


def measure(
    argv: Sequence[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 3600.0,
    stdout_path: Path | None = None,
) -> Run:
    """Run argv as a child; wall time, CPU time and peak memory of its process tree."""
    if env is None:
        # Installed tools run from compiled bytecode; with PYTHONDONTWRITEBYTECODE set (some
        # CI images and sandboxes set it), a checkout installed in editable mode would
        # compile its modules again on every run, a cost no user of a release pays.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out = open(stdout_path or os.devnull, "wb")  # noqa: SIM115
    err = tempfile.TemporaryFile()  # noqa: SIM115
    try:
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
        )
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(SAMPLE_INTERVAL):
                peak = max(peak, tree_rss_bytes(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout, lambda: _kill_group(proc.pid))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
            done.set()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        sampler.join()
        err.seek(0)
        tail = err.read()[-3000:].decode("utf-8", "replace")
    finally:
        out.close()
        err.close()
    return Run(
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        maxrss_mb=usage.ru_maxrss / 1024,  # Linux: KiB
        tree_mb=peak / 2**20,
        returncode=proc.returncode,
        stderr_tail=tail,
    )


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


# --- environments ---------------------------------------------------------------------


@dataclass
class Env:
    name: str
    path: Path | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.path is not None

    def bin(self, script: str) -> str:
        assert self.path is not None
        return str(self.path / "bin" / script)

    @property
    def python(self) -> str:
        return self.bin("python")


# Runs the ema_lint package found in a folder (argv[1]) instead of the installed one.
BASELINE_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); import ema_lint; "
    "from ema_lint.cli import main; sys.exit(main())"
)


def baseline_source(ref: str, cache_dir: Path) -> tuple[str, Path]:
    """(short commit, folder) of the ``ema_lint`` package at git ``ref`` of this checkout,
    extracted once under the cache folder."""
    sha = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dest = cache_dir / "baseline" / sha[:12]
    if not (dest / "ema_lint" / "cli.py").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", sha, "ema_lint"],
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    return sha[:12], dest


def ema_lint_source() -> Path | None:
    """The repository root if it holds an installable ema-lint with a CLI."""
    if (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "ema_lint" / "cli.py").is_file():
        return REPO_ROOT
    return None


def env_specs() -> dict[str, list[str]]:
    specs = {
        "flake8": [FLAKE8],
        "ruff": [RUFF],
        "torchfix": [TORCHFIX, FLAKE8],
        "fixit": [FIXIT],
        "libcst": [LIBCST],
    }
    src = ema_lint_source()
    if src is not None:
        specs["ema-lint"] = ["-e", str(src), FLAKE8]
    return specs


def _spec_fingerprint(reqs: list[str]) -> str:
    h = hashlib.sha256("\n".join(reqs).encode())
    for r in reqs:
        pyproject = Path(r) / "pyproject.toml"
        if pyproject.is_file():  # an editable install: its dependencies may change
            h.update(pyproject.read_bytes())
    return h.hexdigest()[:16]


def ensure_env(name: str, cache_dir: Path, log: Callable[[str], None]) -> Env:
    """Create (once) a venv under cache_dir/venvs/name with the tool installed."""
    specs = env_specs()
    if name not in specs:
        if name == "ema-lint":
            return Env(name, error="ema-lint CLI not found in this checkout (no ema_lint/cli.py)")
        return Env(name, error="unknown environment")
    reqs = specs[name]
    path = cache_dir / "venvs" / name
    marker = path / ".bench-env"
    fingerprint = _spec_fingerprint(reqs)
    if marker.is_file() and marker.read_text().strip() == fingerprint:
        return Env(name, path)
    log(f"installing {name} into {path} ({' '.join(reqs)})")
    if path.exists():
        shutil.rmtree(path)
    proc = subprocess.run([sys.executable, "-m", "venv", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        return Env(name, error=f"venv failed: {proc.stderr.strip()[-300:]}")
    proc = subprocess.run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "-q", *reqs],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        return Env(name, error="pip install failed: " + " / ".join(last))
    marker.write_text(fingerprint + "\n")
    return Env(name, path)


def tool_version(argv: list[str]) -> str:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"? ({exc})"
    text = " ".join((proc.stdout.strip() or proc.stderr.strip()).split())
    return text or "?"


def python_package_version(env: Env, package: str) -> str:
    code = f"from importlib.metadata import version; print(version({package!r}))"
    return tool_version([env.python, "-c", code])


# --- ema-lint capabilities ------------------------------------------------------------


EMA_LINT_FLAGS = (
    "--no-cache",
    "--cache-dir",
    "--jobs",
    "--exit-zero",
    "--quiet",
    "--isolated",
    "--no-respect-gitignore",
)


def detect_flags(help_text: str, flags: Iterable[str] = EMA_LINT_FLAGS) -> set[str]:
    """The flags among `flags` that a --help text mentions as options."""
    found = set()
    for flag in flags:
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
            found.add(flag)
    return found


# --- the tools ------------------------------------------------------------------------


@dataclass
class Tool:
    id: str
    label: str
    env: str  # environment name
    argv: Callable[[Path], list[str]]  # corpus dir -> command
    ok_codes: tuple[int, ...] = (0,)
    prepare: Callable[[Path], list[str]] | None = None  # untimed command before timing
    note: str = ""
    repeat: int = 0  # at least this many runs (rows whose ratio is a target within noise)


@dataclass
class Result:
    tool: Tool
    corpus: str  # "main" or "dense"
    runs: list[Run] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.runs) and not self.error

    @property
    def median(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def min(self) -> float:
        return min(r.wall for r in self.runs)

    @property
    def peak_mb(self) -> float:
        return max(r.peak_mb for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)


def build_tools(
    envs: dict[str, Env],
    cache_dir: Path,
    ema_flags: set[str],
    cpus: int,
    notes: list[str],
    baseline: tuple[str, Path] | None = None,
) -> list[Tool]:
    tools: list[Tool] = []
    ema = envs.get("ema-lint")
    if ema is not None and ema.ok and baseline is not None:
        ref, source = baseline
        # The flags that checkout knows (an older CLI may lack one: its run is then without)
        known = detect_flags(
            subprocess.run(
                [ema.python, "-c", BASELINE_BOOT, str(source), "check", "--help"],
                capture_output=True,
                text=True,
            ).stdout
        )
        flags = [
            f
            for f in ("--exit-zero", "--quiet", "--isolated", "--no-respect-gitignore")
            if f in known
        ]
        tools.append(
            Tool(
                "ema-lint-baseline",
                f"ema-lint at {ref}, no cache, {cpus} jobs",
                "ema-lint",
                lambda c: [
                    ema.python,
                    "-c",
                    BASELINE_BOOT,
                    str(source),
                    "check",
                    *flags,
                    "--no-cache",
                    "--jobs",
                    str(cpus),
                    str(c),
                ],
                (0,),
                note=f"the ema_lint package of {ref}, run with this venv's dependencies",
            )
        )
    if ema is not None and ema.ok:
        base = [ema.bin("ema-lint"), "check"]
        # The corpus sits in a git-ignored cache folder: walk it as ruff does (no gitignore).
        for flag in ("--exit-zero", "--quiet", "--isolated", "--no-respect-gitignore"):
            if flag in ema_flags:
                base.append(flag)
        missing = [f for f in ("--no-cache", "--cache-dir", "--jobs") if f not in ema_flags]
        if missing:
            notes.append(
                "ema-lint check does not offer " + ", ".join(missing) + ": runs without them."
            )
        cold = ["--no-cache"] if "--no-cache" in ema_flags else []
        ok = (0, 1) if "--exit-zero" not in ema_flags else (0,)
        if "--jobs" in ema_flags:
            tools.append(
                Tool(
                    "ema-lint-j1",
                    "ema-lint, no cache, 1 job",
                    "ema-lint",
                    lambda c: [*base, *cold, "--jobs", "1", str(c)],
                    ok,
                )
            )
            tools.append(
                Tool(
                    "ema-lint-cold",
                    f"ema-lint, no cache, {cpus} jobs",
                    "ema-lint",
                    lambda c: [*base, *cold, "--jobs", str(cpus), str(c)],
                    ok,
                )
            )
        else:
            tools.append(
                Tool(
                    "ema-lint-cold",
                    "ema-lint, no cache, default jobs",
                    "ema-lint",
                    lambda c: [*base, *cold, str(c)],
                    ok,
                )
            )
        if "--cache-dir" in ema_flags:
            warm_dir = cache_dir / "ema-lint-warm-cache"

            def warm(c: Path) -> list[str]:
                return [*base, "--cache-dir", str(warm_dir), str(c)]

            tools.append(
                Tool(
                    "ema-lint-warm",
                    "ema-lint, warm cache",
                    "ema-lint",
                    warm,
                    ok,
                    prepare=warm,
                )
            )
        tools.append(
            Tool(
                "flake8-ema",
                "flake8 --select EMA (ema-lint plugin)",
                "ema-lint",
                lambda c: [ema.bin("flake8"), "--isolated", "--select", "EMA", str(c)],
                (0, 1),
            )
        )
        tools.append(
            Tool(
                "flake8-F+ema",
                "flake8 --select F, ema-lint installed",
                "ema-lint",
                lambda c: [ema.bin("flake8"), "--isolated", "--select", "F", str(c)],
                (0, 1),
                repeat=FLAKE8_REPEAT,
            )
        )
        tools.append(
            Tool(
                "flake8-F,EMA",
                "flake8 --select F,EMA (as users run the plugin)",
                "ema-lint",
                lambda c: [ema.bin("flake8"), "--isolated", "--select", "F,EMA", str(c)],
                (0, 1),
                repeat=FLAKE8_REPEAT,
            )
        )
    fl = envs.get("flake8")
    if fl is not None and fl.ok:
        tools.append(
            Tool(
                "flake8-F",
                "flake8 --select F, no ema-lint",
                "flake8",
                lambda c: [fl.bin("flake8"), "--isolated", "--select", "F", str(c)],
                (0, 1),
                repeat=FLAKE8_REPEAT,
            )
        )
    parse_env = ema if ema is not None and ema.ok else envs.get("libcst")
    if parse_env is not None and parse_env.ok:
        tools.append(
            Tool(
                "libcst-parse",
                "libcst parse only (floor)",
                parse_env.name,
                lambda c: [parse_env.python, str(HERE / "libcst_parse.py"), str(c)],
            )
        )
    rf = envs.get("ruff")
    if rf is not None and rf.ok:
        ruff = [rf.bin("ruff"), "check", "--isolated", "--no-respect-gitignore", "--exit-zero"]
        ruff += ["--select", "E9,F"]
        ruff_cache = cache_dir / "ruff-warm-cache"
        tools.append(
            Tool(
                "ruff-cold",
                "ruff --select E9,F, no cache",
                "ruff",
                lambda c: [*ruff, "--no-cache", str(c)],
            )
        )

        def ruff_warm(c: Path) -> list[str]:
            return [*ruff, "--cache-dir", str(ruff_cache), str(c)]

        tools.append(
            Tool(
                "ruff-warm", "ruff --select E9,F, warm cache", "ruff", ruff_warm, prepare=ruff_warm
            )
        )
    tf = envs.get("torchfix")
    if tf is not None and tf.ok:
        tools.append(
            Tool(
                "torchfix",
                "torchfix (standalone, default rules)",
                "torchfix",
                lambda c: [tf.bin("torchfix"), str(c)],
                (0, 1),
            )
        )
        tools.append(
            Tool(
                "torchfix-flake8",
                "flake8 --select TOR (TorchFix plugin)",
                "torchfix",
                lambda c: [tf.bin("flake8"), "--isolated", "--select", "TOR", str(c)],
                (0, 1),
            )
        )
    fx = envs.get("fixit")
    if fx is not None and fx.ok:
        tools.append(
            Tool(
                "fixit",
                "fixit lint (default rules)",
                "fixit",
                lambda c: [fx.bin("fixit"), "lint", str(c)],
                (0, 1, 2, 3),
            )
        )
    return tools


TOOL_GROUPS = {
    "ema-lint-j1": "ema-lint",
    "ema-lint-cold": "ema-lint",
    "ema-lint-warm": "ema-lint",
    "ema-lint-baseline": "ema-lint",
    "flake8-ema": "flake8",
    "flake8-F+ema": "flake8",
    "flake8-F,EMA": "flake8",
    "flake8-F": "flake8",
    "libcst-parse": "libcst",
    "ruff-cold": "ruff",
    "ruff-warm": "ruff",
    "torchfix": "torchfix",
    "torchfix-flake8": "torchfix",
    "fixit": "fixit",
}
GROUP_ENVS = {
    "ema-lint": ("ema-lint",),
    "flake8": ("ema-lint", "flake8"),
    "libcst": ("ema-lint",),  # the floor runs on ema-lint's libcst ("libcst" env otherwise)
    "ruff": ("ruff",),
    "torchfix": ("torchfix",),
    "fixit": ("fixit",),
}


def parse_tools(spec: str | None) -> set[str]:
    """Tool ids selected by --tools (a comma list of group names and tool ids)."""
    if not spec:
        return set(TOOL_GROUPS)
    chosen: set[str] = set()
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in GROUPS:
            chosen |= {t for t, g in TOOL_GROUPS.items() if g == item}
        elif item in TOOL_GROUPS:
            chosen.add(item)
        else:
            raise SystemExit(
                f"unknown tool {item!r}; groups: {', '.join(GROUPS)}; ids: {', '.join(TOOL_GROUPS)}"
            )
    return chosen


def envs_needed(tool_ids: set[str]) -> list[str]:
    names: list[str] = []
    for tid in sorted(tool_ids):
        for env in GROUP_ENVS[TOOL_GROUPS[tid]]:
            if env not in names:
                names.append(env)
    return names


# --- the corpus views -----------------------------------------------------------------


@dataclass
class View:
    name: str
    path: Path
    counts: corpus.Counts


def quick_keep(sources: list[tuple[str, Path]], per_package: int, max_lines: int) -> set[Path]:
    """A small, EMA-heavy subset: the first short EMA-dense files of each package."""
    keep: set[Path] = set()
    for _, root in sources:
        picked = 0
        for path in corpus.iter_files(root):
            if picked >= per_package:
                break
            text = corpus.read_text(path)
            if text.count("\n") <= max_lines and corpus.is_ema_dense(text):
                keep.add(path)
                picked += 1
    return keep


def every_nth(paths: Iterable[Path], step: int) -> set[Path]:
    """Every step-th path of the sorted list, starting with the first."""
    return set(sorted(paths)[::step])


def make_views(
    sources: list[tuple[str, Path]], workdir: Path, quick: bool, sample_step: int
) -> dict[str, View]:
    """The folders the tools lint (hard links, .py only).

    main: the corpus (or the quick subset); dense: its EMA-dense files; sample: every
    sample_step-th file of main, for the tools too slow for all of it; warmup: one file.
    """
    all_files = [p for _, root in sources for p in corpus.iter_files(root)]
    if quick:
        chosen = quick_keep(sources, QUICK_FILES_PER_PACKAGE, QUICK_MAX_LINES)
    else:
        chosen = set(all_files)
    sample = chosen if quick else every_nth(chosen, sample_step)
    dense = {p for p in chosen if corpus.is_ema_dense(corpus.read_text(p))}
    first = {min(all_files)} if all_files else set()
    views = {}
    for name, keep in (("main", chosen), ("dense", dense), ("sample", sample), ("warmup", first)):
        path = workdir / name
        views[name] = View(name, path, corpus.build_view(path, sources, keep.__contains__))
    return views


def parsed_view(
    env: Env, main_view: View, workdir: Path, log: Callable[[str], None]
) -> View | None:
    """The sources a cold ema-lint run parses with libcst (``parsed_sources.py``, untimed)."""
    path = workdir / "parsed"
    log("recording the sources ema-lint parses (benchmarks/parsed_sources.py)")
    done = subprocess.run(
        [env.python, str(HERE / "parsed_sources.py"), str(path), str(main_view.path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        log(f"  failed: {done.stderr.strip()[-300:]}")
        return None
    return View("parsed", path, corpus.count_tree(path))


# --- running --------------------------------------------------------------------------


def run_tools(
    tools: list[Tool],
    views: dict[str, View],
    plan: list[tuple[str, str]],  # (tool id, view name) in order
    repeat: int,
    workdir: Path,
    log: Callable[[str], None],
    slow_seconds: float = SLOW_SECONDS,
) -> dict[tuple[str, str], Result]:
    by_id = {t.id: t for t in tools}
    results = {(tid, v): Result(by_id[tid], v) for tid, v in plan}
    # warm-up: compile bytecode, load the tool once, page in its files
    for tid in dict.fromkeys(tid for tid, _ in plan):
        if "warmup" in views:
            measure(by_id[tid].argv(views["warmup"].path), cwd=workdir)
    for (tid, v), res in results.items():
        prep = res.tool.prepare
        if prep is not None:
            log(f"filling cache: {tid} on {v}")
            r = measure(prep(views[v].path), cwd=workdir)
            if r.returncode not in res.tool.ok_codes:
                res.error = f"exit {r.returncode}: {r.stderr_tail.strip()[-500:]}"
    for i in range(max(repeat, QUICK_REPEAT, *(t.repeat for t in by_id.values()))):
        for (tid, v), res in results.items():
            if res.error:
                continue
            if i > 0 and res.runs and res.runs[0].wall > slow_seconds:
                continue  # too slow to repeat: one run is reported as n=1
            wanted = max(repeat, res.tool.repeat)
            if i >= wanted and not (res.runs and res.runs[0].wall < QUICK_SECONDS):
                continue  # the extra rounds are for the sub-second runs (and the flake8 rows)
            log(f"[{i + 1}/{wanted}] {tid} on {v} ({views[v].counts.files} files)")
            r = measure(res.tool.argv(views[v].path), cwd=workdir)
            if r.returncode not in res.tool.ok_codes:
                res.error = f"exit {r.returncode}: {r.stderr_tail.strip()[-500:]}"
                log(f"  failed: {res.error}")
                continue
            res.runs.append(r)
            log(f"  {r.wall:.2f} s, {r.peak_mb:.0f} MB")
    return results


# --- reporting ------------------------------------------------------------------------


def fmt_rate(n: float) -> str:
    if n >= 100:
        return f"{n:,.0f}"
    return f"{n:,.1f}"


def fmt_ratio(x: float) -> str:
    if x >= 10:
        return f"{x:,.0f}x"
    if x >= 1:
        return f"{x:.2f}x"
    return f"{x:.3f}x"


def format_table(rows: list[dict], reference: float | None) -> str:
    """Markdown table. rows: label, n, median, min, files, lines, peak_mb, cpu (or error)."""
    out = [
        "| tool | runs | wall s median | wall s min | CPU s | files/s | lines/s | peak MB "
        "| ratio to ema-lint |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.get("error"):
            out.append(f"| {row['label']} | - | {row['error']} | | | | | | |")
            continue
        med = row["median"]
        ratio = fmt_ratio(med / reference) if reference else "-"
        out.append(
            f"| {row['label']} | {row['n']} | {med:.3f} | {row['min']:.3f} | {row['cpu']:.2f} "
            f"| {fmt_rate(row['files'] / med)} | {fmt_rate(row['lines'] / med)} "
            f"| {row['peak_mb']:.0f} | {ratio} |"
        )
    return "\n".join(out)


def result_row(res: Result, counts: corpus.Counts) -> dict:
    if not res.ok:
        return {"label": res.tool.label, "error": "failed: " + res.error.splitlines()[0][:80]}
    return {
        "label": res.tool.label,
        "n": len(res.runs),
        "median": res.median,
        "min": res.min,
        "cpu": res.cpu,
        "files": counts.files,
        "lines": counts.lines,
        "peak_mb": res.peak_mb,
    }


@dataclass
class Target:
    name: str
    status: str  # PASS, MISS, n/a
    detail: str


def check_upper(name: str, value: float, limit: float, unit: str, what: str) -> Target:
    """PASS if value <= limit; the detail says by how much."""
    if value <= limit:
        head = f"{(1 - value / limit) * 100:.0f}% under the limit" if limit else "at the limit"
        return Target(name, "PASS", f"{what} {value:.3g}{unit} <= {limit:.3g}{unit} ({head})")
    return Target(
        name,
        "MISS",
        f"{what} {value:.3g}{unit} > {limit:.3g}{unit} ({value / limit:.2f}x the limit)",
    )


def evaluate_targets(results: dict[tuple[str, str], Result]) -> list[Target]:
    def get(tid: str, view: str = "main") -> Result | None:
        r = results.get((tid, view))
        return r if r is not None and r.ok else None

    targets: list[Target] = []
    ema = get("ema-lint-cold")
    ruff = get("ruff-cold")
    name = "whole corpus cold within 5x of ruff --select E9,F --no-cache"
    if ema and ruff:
        targets.append(check_upper(name, ema.median, 5 * ruff.median, " s", "ema-lint"))
        targets[
            -1
        ].detail += (
            f"; ratio {ema.median / ruff.median:.1f}x ruff (CPU time: {cpu_ratio(ema, ruff)})"
        )
        floor = get("libcst-parse", "parsed")
        if floor:
            targets[-1].detail += (
                f"; a bare libcst parse of the files it parses alone takes {floor.cpu:.1f} s CPU,"
                f" {cpu_ratio(floor, ruff)} ruff's (see Files ema-lint parses)"
            )
    else:
        targets.append(Target(name, "n/a", "needs ema-lint and ruff"))
    for tid, label in (("torchfix", "TorchFix standalone"), ("fixit", "fixit lint")):
        name = f">= 50x faster than {label}"
        view = "sample" if (tid, "sample") in results else "main"
        other, mine = get(tid, view), get("ema-lint-cold", view)
        if mine and other:
            speedup = other.median / mine.median
            status = "PASS" if speedup >= 50 else "MISS"
            how = (
                f"{speedup / 50:.2f}x the goal"
                if status == "PASS"
                else f"{50 / speedup:.1f}x short"
            )
            where = "on the sample" if view == "sample" else "on the whole corpus"
            targets.append(
                Target(
                    name,
                    status,
                    f"speed-up {speedup:.1f}x {where} ({how}; CPU time: {cpu_ratio(other, mine)})",
                )
            )
        else:
            targets.append(Target(name, "n/a", f"needs ema-lint and {label}"))
    warm, ruff_warm = get("ema-lint-warm"), get("ruff-warm")
    name = "warm cache within 2x of ruff with its cache"
    if warm and ruff_warm:
        targets.append(check_upper(name, warm.median, 2 * ruff_warm.median, " s", "ema-lint warm"))
        targets[-1].detail += f" (CPU time: {cpu_ratio(warm, ruff_warm)} ruff's)"
    else:
        targets.append(Target(name, "n/a", "needs ema-lint --cache-dir and ruff"))
    dense = get("ema-lint-j1", "dense") or get("ema-lint-cold", "dense")
    floor = get("libcst-parse", "dense")
    name = "EMA-dense files: ema-lint (1 job, no cache) <= 1.3x bare libcst parse"
    if dense and floor:
        ratio = dense.median / floor.median
        targets.append(check_upper(name, ratio, 1.3, "x", "ratio"))
        targets[-1].detail += f" (CPU time: {cpu_ratio(dense, floor)})"
    else:
        targets.append(Target(name, "n/a", "needs ema-lint and the libcst floor"))
    f8_view = "sample" if ("flake8-F", "sample") in results else "main"
    with_plugin, without = get("flake8-F+ema", f8_view), get("flake8-F", f8_view)
    name = "flake8 plugin adds <= 10% to flake8 --select F"
    if with_plugin and without:
        overhead = (with_plugin.median - without.median) / without.median * 100
        targets.append(check_upper(name, overhead, 10, "%", "overhead"))
        cpu_overhead = (with_plugin.cpu - without.cpu) / without.cpu * 100 if without.cpu else 0
        targets[-1].detail += (
            f" ({with_plugin.median:.2f} s with ema-lint installed,"
            f" {without.median:.2f} s without; CPU time overhead {cpu_overhead:.0f}%"
            + ("; on the sample)" if f8_view == "sample" else ")")
        )
    else:
        targets.append(Target(name, "n/a", "needs flake8 with and without ema-lint"))
    users, without = get("flake8-F,EMA", f8_view), get("flake8-F", f8_view)
    name = "flake8 --select F,EMA <= 1.10x flake8 --select F without ema-lint (CPU)"
    if users and without and without.cpu:
        ratio = users.cpu / without.cpu
        targets.append(check_upper(name, ratio, 1.10, "x", "CPU ratio"))
        targets[-1].detail += (
            f" ({users.cpu:.2f} s CPU with the plugin selected, {without.cpu:.2f} s without"
            + ("; on the sample)" if f8_view == "sample" else ")")
        )
    else:
        targets.append(Target(name, "n/a", "needs flake8 with and without ema-lint"))
    name = "peak memory < 300 MB with default jobs"
    if ema:
        targets.append(check_upper(name, ema.peak_mb, 300, " MB", "peak (process tree)"))
    else:
        targets.append(Target(name, "n/a", "needs ema-lint"))
    return targets


def concatenation_series(env: Env, log) -> str:
    """``benchmarks/concat.py`` in the ema-lint venv: is the analysis linear in size?"""
    log("concatenation series (benchmarks/concat.py)")
    done = subprocess.run(
        [env.python, str(HERE / "concat.py"), "--copies", "1,2,4,8,16,32", "--repeat", "3"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"concatenation series failed: {done.stderr.strip()[-300:]}"
    return "linear in module size (benchmarks/concat.py):\n\n" + done.stdout.strip()


def cpu_ratio(a: Result, b: Result) -> str:
    """a's median CPU time over b's, as text."""
    return f"{a.cpu / b.cpu:.1f}x" if b.cpu > 0 else "-"


SLOW_TOOLS = ("torchfix", "torchfix-flake8", "fixit")


def build_plan(
    tool_ids: Sequence[str], slow_on: str, sample_tools: Sequence[str] = SLOW_TOOLS
) -> list[tuple[str, str]]:
    """(tool id, view) pairs to time, in order.

    slow_on "sample": the sample_tools lint the sample instead of the whole corpus, and
    ema-lint and the libcst floor lint the sample too, for the ratios. slow_on "main":
    everything lints the whole corpus.
    """
    ids = list(tool_ids)
    on_sample = [t for t in ids if t in sample_tools] if slow_on == "sample" else []
    plan = [(t, "main") for t in ids if t not in on_sample]
    dense_ema = "ema-lint-j1" if "ema-lint-j1" in ids else "ema-lint-cold"
    plan += [(t, "dense") for t in (dense_ema, "libcst-parse") if t in ids]
    if on_sample:
        extra = [t for t in ("ema-lint-cold", "libcst-parse") if t in ids and t not in on_sample]
        plan += [(t, "sample") for t in (*extra, *on_sample)]
    return plan


SECTIONS = {
    "main": (
        "Whole corpus",
        "ema-lint-cold",
        "Ratio = the tool's median wall time / ema-lint's (no cache, all jobs).",
    ),
    "parsed": (
        "Files ema-lint parses",
        "libcst-parse",
        "The sources a cold ema-lint run of the whole corpus hands to libcst (recorded by"
        " `benchmarks/parsed_sources.py`: the files the pre-filter and the project model let"
        " through, and the project modules summarised for them), each parsed once by a bare"
        " `libcst.parse_module`: the floor of the cold run for as long as those files are"
        " parsed with libcst, whatever the analysis costs (ema-lint's own parse skips"
        " libcst's re-validation of the nodes and is somewhat cheaper).",
    ),
    "dense": (
        "EMA-dense files",
        "ema-lint-j1",
        "Ratio = the tool's median wall time / ema-lint's (1 job, no cache) on the same files.",
    ),
    "sample": (
        "Sample for the slow tools",
        "ema-lint-cold",
        "The tools named by --sample-tools ({sample_tools}) lint a fixed sample of the corpus"
        " (every {step}th file in path order) instead of all of it, because they are too slow"
        " for the whole corpus on this machine; ema-lint and the libcst floor lint the same"
        " files for the ratios.",
    ),
}


def section_table(results: dict[tuple[str, str], Result], view: View) -> str:
    _, ref_id, _ = SECTIONS[view.name]
    ref = results.get((ref_id, view.name))
    if (ref is None or not ref.ok) and view.name == "dense":
        ref = results.get(("ema-lint-cold", "dense"))
    reference = ref.median if ref is not None and ref.ok else None
    rows = [result_row(r, view.counts) for (_, v), r in results.items() if v == view.name]
    return format_table(rows, reference)


def format_targets(targets: list[Target]) -> str:
    out = ["| target | result | measured |", "|---|---|---|"]
    out += [f"| {t.name} | **{t.status}** | {t.detail} |" for t in targets]
    return "\n".join(out)


def machine_description() -> list[str]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    os_name = platform.platform()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"') + f" (kernel {platform.release()})"
    except OSError:
        pass
    return [
        f"- CPU: {cpu}",
        f"- cores: {os.cpu_count()} (usable: {len(os.sched_getaffinity(0))})",
        f"- RAM: {ram}",
        f"- OS: {os_name}",
        f"- Python: {platform.python_version()} ({sys.executable})",
        f"- load average (1, 5, 15 min) when the report was written: {load_average()}"
        " (other work on the machine slows the runs: compare wall and CPU time)",
    ]


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


# --- main -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Tool groups for --tools: "
        + ", ".join(GROUPS)
        + ". A full run takes about 30-40 minutes on 2 cores (TorchFix and fixit dominate);"
        " --quick about 2 minutes once the corpus and the venvs exist.",
    )
    p.add_argument(
        "--repeat", type=int, default=None, help=f"repetitions (default {DEFAULT_REPEAT})"
    )
    p.add_argument(
        "--quick", action="store_true", help="small subset, 1 repetition, no results file"
    )
    p.add_argument("--tools", default=None, help="comma list of tool groups or ids to run")
    p.add_argument(
        "--corpus-dir",
        type=Path,
        default=None,
        help="lint this folder of .py files instead of the downloaded corpus",
    )
    p.add_argument(
        "--cache-dir", type=Path, default=None, help="cache folder (default .bench-cache/)"
    )
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help="results file (default benchmarks/results.md; --quick writes none unless given)",
    )
    p.add_argument(
        "--slow-seconds",
        type=float,
        default=SLOW_SECONDS,
        help=f"do not repeat a tool whose first run took longer (default {SLOW_SECONDS:.0f})",
    )
    p.add_argument(
        "--sample-step",
        type=int,
        default=SAMPLE_STEP,
        help=f"TorchFix and fixit lint every N-th file (default {SAMPLE_STEP})",
    )
    p.add_argument(
        "--sample-tools",
        default=",".join(SLOW_TOOLS),
        help="tool groups or ids that lint the sample instead of the whole corpus"
        f" (default {','.join(SLOW_TOOLS)})",
    )
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also time ema-lint as it was at this git ref (no cache, all jobs), side by side",
    )
    p.add_argument(
        "--slow-on-all",
        action="store_true",
        help="run TorchFix and fixit on the whole corpus too (hours on 2 cores)",
    )
    args = p.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    repeat = args.repeat or (1 if args.quick else DEFAULT_REPEAT)
    cache_dir = (args.cache_dir or corpus.default_cache_dir()).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    selected = parse_tools(args.tools)
    sample_tools = sorted(parse_tools(args.sample_tools))
    cpus = len(os.sched_getaffinity(0))
    notes: list[str] = []
    t_start = time.perf_counter()
    notes.append(f"load average when the run started: {load_average()}")

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t_start:7.1f}s] {msg}", file=sys.stderr, flush=True)

    # 1. corpus
    if args.corpus_dir is not None:
        root = args.corpus_dir.resolve()
        sources = [(root.name, root)]
        corpus_rows = None
    else:
        fetched = corpus.ensure(corpus.packages_for(corpus.BENCH), cache_dir, log)
        sources = [(f.package.key, f.path) for f in fetched]
        corpus_rows = [
            (f.package, corpus.count_tree(f.path), corpus.count_tree(f.path, OTHER))
            for f in fetched
        ]

    # 2. environments
    envs: dict[str, Env] = {}
    for name in envs_needed(selected):
        envs[name] = ensure_env(name, cache_dir, log)
    if "libcst-parse" in selected and not envs["ema-lint"].ok:
        envs["libcst"] = ensure_env("libcst", cache_dir, log)
    unavailable = {n: e.error for n, e in envs.items() if not e.ok}
    for n, e in unavailable.items():
        log(f"not available: {n}: {e}")

    ema_flags: set[str] = set()
    if envs.get("ema-lint", Env("x")).ok:
        help_text = subprocess.run(
            [envs["ema-lint"].bin("ema-lint"), "check", "--help"], capture_output=True, text=True
        ).stdout
        ema_flags = detect_flags(help_text)

    # views live outside any git checkout: some tools skip git-ignored folders
    with tempfile.TemporaryDirectory(prefix="ema-lint-bench-") as tmp:
        workdir = Path(tmp)
        views = make_views(sources, workdir, args.quick, args.sample_step)
        for v in views.values():
            log(f"view {v.name}: {v.counts.files} files, {v.counts.lines:,} lines")
        baseline = baseline_source(args.baseline, cache_dir) if args.baseline else None
        if baseline is not None:
            selected.add("ema-lint-baseline")
        built = build_tools(envs, cache_dir, ema_flags, cpus, notes, baseline)
        tools = [t for t in built if t.id in selected]
        for stale in ("ema-lint-warm-cache", "ruff-warm-cache"):
            shutil.rmtree(cache_dir / stale, ignore_errors=True)
        slow_on = "main" if args.quick or args.slow_on_all else "sample"
        plan = build_plan([t.id for t in tools], slow_on, sample_tools)
        if "libcst-parse" in selected and not args.quick and envs.get("ema-lint", Env("x")).ok:
            parsed = parsed_view(envs["ema-lint"], views["main"], workdir, log)
            if parsed is not None:
                views["parsed"] = parsed
                plan.append(("libcst-parse", "parsed"))
        if any(t.id == "ruff-cold" for t in tools):
            notes.append(ruff_file_check(envs["ruff"], views["main"]))
        results = run_tools(tools, views, plan, repeat, workdir, log, args.slow_seconds)

    # 3. report
    sections = []
    for name in ("main", "parsed", "dense", "sample"):
        if any(v == name for _, v in results):
            title, _, text = SECTIONS[name]
            table = section_table(results, views[name])
            if name == "main":
                for env_name, err in unavailable.items():
                    table += f"\n| {env_name} | - | not available: {err[:150]} | | | | | | |"
            text = text.format(step=args.sample_step, sample_tools=", ".join(sample_tools))
            sections.append((title, text, views[name], table))
    ema_env = envs.get("ema-lint")
    if ema_env is not None and ema_env.ok and not args.quick:
        notes.append(concatenation_series(ema_env, log))
    report = render_report(
        args=args,
        repeat=repeat,
        corpus_rows=corpus_rows,
        views=views,
        sections=sections,
        targets=evaluate_targets(results),
        versions=collect_versions(envs),
        notes=notes,
        total=time.perf_counter() - t_start,
    )
    print(report)
    output = args.output or (None if args.quick else HERE / "results.md")
    if output is not None:
        output.write_text(report)
        log(f"wrote {output}")
    (cache_dir / "last-run.json").write_text(
        json.dumps(
            {
                f"{tid}@{v}": [dataclasses.asdict(run) for run in r.runs] or r.error
                for (tid, v), r in results.items()
            },
            indent=1,
        )
    )
    return 0


def ruff_file_check(env: Env, view: View) -> str:
    """Check that ruff sees every file of the corpus (its default excludes could hide some)."""
    proc = subprocess.run(
        [
            env.bin("ruff"),
            "check",
            "--isolated",
            "--no-respect-gitignore",
            "--show-files",
            str(view.path),
        ],
        capture_output=True,
        text=True,
    )
    seen = sum(1 for line in proc.stdout.splitlines() if line.strip().endswith(".py"))
    if seen == view.counts.files:
        return f"ruff sees all {seen} corpus files."
    return f"WARNING: ruff sees {seen} of {view.counts.files} corpus files."


def collect_versions(envs: dict[str, Env]) -> list[str]:
    out = []
    for name, env in envs.items():
        if not env.ok:
            out.append(f"- {name}: not available ({env.error[:200]})")
            continue
        if name == "ema-lint":
            ver = tool_version([env.bin("ema-lint"), "--version"])
            commit = tool_version(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"])
            out.append(
                f"- ema-lint: {ver} (checkout {commit}); "
                f"libcst {python_package_version(env, 'libcst')}; "
                f"flake8 {python_package_version(env, 'flake8')}"
            )
        elif name == "flake8":
            out.append(
                f"- flake8 (without ema-lint): {tool_version([env.bin('flake8'), '--version'])}"
            )
        elif name == "ruff":
            out.append(f"- ruff: {tool_version([env.bin('ruff'), '--version'])}")
        elif name == "torchfix":
            out.append(
                f"- torchfix: {python_package_version(env, 'torchfix')}; "
                f"libcst {python_package_version(env, 'libcst')}; "
                f"flake8 {python_package_version(env, 'flake8')}"
            )
        elif name == "fixit":
            out.append(
                f"- fixit: {python_package_version(env, 'fixit')}; "
                f"libcst {python_package_version(env, 'libcst')}"
            )
        elif name == "libcst":
            out.append(f"- libcst (floor, no ema-lint): {python_package_version(env, 'libcst')}")
    return out


def render_report(
    *,
    args: argparse.Namespace,
    repeat: int,
    corpus_rows,
    views: dict[str, View],
    sections: list[tuple[str, str, View, str]],
    targets: list[Target],
    versions: list[str],
    notes: list[str],
    total: float,
) -> str:
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = " ".join(["python benchmarks/run.py", *args.argv])
    main_view, dense_view = views["main"], views["dense"]
    lines = [
        "# ema-lint benchmark results",
        "",
        f"Date: {now}. Command: `{cmd}`. Repetitions: {repeat}"
        f" (a tool whose first run took over {args.slow_seconds:.0f} s ran once; one under "
        f"{QUICK_SECONDS:.0f} s, {max(repeat, QUICK_REPEAT)} times)."
        f" Total time of the run: {total / 60:.1f} min.",
        "",
        "## Machine",
        "",
        *machine_description(),
        "",
        "## Tools",
        "",
        *versions,
        "",
        "## Corpus",
        "",
    ]
    if corpus_rows is not None:
        lines += [corpus.format_counts_table(corpus_rows), ""]
    else:
        lines += [f"Folder given with --corpus-dir: `{args.corpus_dir}`.", ""]
    subset = (
        "(quick subset: the first short EMA-dense files of each package)."
        if args.quick
        else "(all of them)."
    )
    lines += [
        f"Linted: **{main_view.counts.files:,} files, {main_view.counts.lines:,} lines, "
        f"{main_view.counts.bytes / 2**20:.1f} MB** of `.py` {subset}",
        "",
        f"EMA-dense subset: **{dense_view.counts.files:,} files, "
        f"{dense_view.counts.lines:,} lines**: the files whose text matches"
        " (Python `re`, case-sensitive)",
        "",
        f"    {corpus.EMA_DENSE_PATTERN}",
        "",
        "that is, `ema`/`swa` as a snake_case component, `Ema`/`Swa` or `EMA`/`SWA` as a "
        "CamelCase or UPPER_CASE component, or one of AveragedModel, SWALR, update_bn, "
        "ExponentialMovingAverage; comments and strings count.",
        "",
        "Wall time is measured around each child process (`time.perf_counter`). CPU s = user +"
        " system time of the child's tree (`os.wait4`). Peak MB = the larger of the child's"
        " `ru_maxrss` (largest single process of the tree, `os.wait4`) and the largest sampled"
        " sum of RSS over the child's process tree (every 100 ms from /proc). Each tool runs once"
        " untimed on one file first (bytecode, page cache).",
        "",
    ]
    for title, text, view, table in sections:
        lines += [
            f"## {title}",
            "",
            f"{view.counts.files:,} files, {view.counts.lines:,} lines. {text}",
            "",
            table,
            "",
        ]
    lines += [
        "## Targets",
        "",
        format_targets(targets),
        "",
        "Flake8 plugin overhead method: every installed flake8 plugin runs on every file whatever "
        "`--select` says, so `flake8 --select F` is timed in two environments with the same "
        "flake8 version, one with ema-lint installed and one without; the overhead is the "
        "difference of the medians over the time without.",
        "",
    ]
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
