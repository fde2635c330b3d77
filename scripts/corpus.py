"""A pinned corpus of real training libraries, downloaded once from PyPI.

Used by ``benchmarks/run.py`` (speed) and ``scripts/ecosystem.py`` (diagnostics and
fix checks over real code). Each package is fetched with ``pip download --no-deps``
(an sdist when it carries the Python sources, else a wheel) into
``<cache>/dist/`` and unpacked to ``<cache>/src/<name>-<version>/`` keeping only
``*.py``, ``*.ipynb``, ``*.yaml`` and ``*.yml`` files.

A second run downloads nothing: an unpacked package is marked complete, and a
downloaded archive is reused.

Usage::

    python scripts/corpus.py                 # every package (benchmark + ecosystem)
    python scripts/corpus.py --set bench     # only the benchmark corpus
    python scripts/corpus.py --cache-dir /tmp/c --list

The cache folder is ``.bench-cache/`` at the repository root, or ``$EMA_LINT_BENCH_CACHE``,
or ``--cache-dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_ENV = "EMA_LINT_BENCH_CACHE"
KEEP_SUFFIXES = (".py", ".ipynb", ".yaml", ".yml")
COMPLETE_MARKER = ".corpus-complete.json"

BENCH = "bench"
ECOSYSTEM = "ecosystem"


@dataclass(frozen=True)
class Package:
    """One pinned distribution on PyPI."""

    name: str  # PyPI project name
    version: str  # exact pin
    kind: str  # "sdist" or "wheel"
    sets: tuple[str, ...]  # BENCH and/or ECOSYSTEM
    why: str = ""

    @property
    def key(self) -> str:
        return f"{normalize(self.name)}-{self.version}"

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


# Pins: the newest release on PyPI when the list was made. The benchmark corpus
# matches the one measured in the shared linter reference (section 3) plus diffusers.
PACKAGES: tuple[Package, ...] = (
    Package("timm", "1.0.31", "sdist", (BENCH, ECOSYSTEM), "ModelEmaV1/V2/V3"),
    Package("ultralytics", "8.4.190", "sdist", (BENCH, ECOSYSTEM), "ModelEMA in trainers"),
    Package("pytorch-lightning", "2.6.6", "sdist", (BENCH, ECOSYSTEM), "WeightAveraging, SWA"),
    Package("diffusers", "0.42.1", "sdist", (BENCH, ECOSYSTEM), "EMAModel, training scripts"),
    Package("ema-pytorch", "0.8.3", "sdist", (BENCH, ECOSYSTEM), "EMA, PostHocEMA"),
    Package("torch-ema", "0.3", "sdist", (BENCH, ECOSYSTEM), "ExponentialMovingAverage"),
    Package(
        "mmengine",
        "0.10.7",
        "wheel",  # the sdist setup.py imports pkg_resources: no isolated build
        (ECOSYSTEM,),
        "ExponentialMovingAverage hooks",
    ),
    Package("mosaicml", "0.32.1", "sdist", (ECOSYSTEM,), "composer EMA / SWA algorithms"),
    Package("keras", "3.15.1", "sdist", (ECOSYSTEM,), "use_ema in optimizers"),
    Package("optax", "0.2.8", "sdist", (ECOSYSTEM,), "ema transforms (JAX)"),
    Package("flax", "0.12.12", "sdist", (ECOSYSTEM,), "JAX training code"),
    Package("accelerate", "1.15.0", "sdist", (ECOSYSTEM,), "training loops"),
    Package(
        "torchvision",
        "0.29.1",  # no sdist on PyPI; 0.29.1 also fits machines that cap torchvision there
        "wheel",
        (ECOSYSTEM,),
        "models, ops, transforms",
    ),
    Package("lightly", "1.6.0", "sdist", (ECOSYSTEM,), "momentum encoders (EMA)"),
    Package("open-clip-torch", "3.3.0", "sdist", (ECOSYSTEM,), "training scripts"),
    Package("mmdet", "3.3.0", "sdist", (ECOSYSTEM,), "EMA hooks, configs"),
)


def normalize(name: str) -> str:
    """PEP 503 name normalisation, with '_' so it reads well in folder names."""
    return re.sub(r"[-_.]+", "_", name).lower()


def packages_for(which: str) -> list[Package]:
    """Packages of one set ("bench", "ecosystem") or "all"."""
    if which == "all":
        return list(PACKAGES)
    if which not in (BENCH, ECOSYSTEM):
        raise ValueError(f"unknown package set {which!r}")
    return [p for p in PACKAGES if which in p.sets]


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else REPO_ROOT / ".bench-cache"


# --- EMA-dense filter -------------------------------------------------------------------

# A file is "EMA-dense" when its text names EMA or SWA as a component of an identifier
# (snake_case, camelCase or UPPER_CASE), or one of the averaging APIs by name.
#   lower:  model_ema, ema_decay, ema.update, use_swa     (not schema, emacs, swap)
#   title:  ModelEma, EmaModel, ModelEmaV2, SwaLR          (not Emacs, Swap)
#   upper:  EMA, MODEL_EMA, EMAHelper, ModelEMA            (not EMAIL, SWAP)
#   names:  AveragedModel, SWALR, update_bn, ExponentialMovingAverage
# Comments and strings count too: it is a text filter, not a parse.
EMA_DENSE_PATTERN = (
    r"(?<![A-Za-z])(?:ema|swa)(?![a-z])"
    r"|(?<![A-Z])(?:Ema|Swa)(?![a-z])"
    r"|(?<![A-Z])(?:EMA|SWA)(?=[^A-Za-z]|$|[A-Z][a-z])"
    r"|AveragedModel|SWALR|update_bn|ExponentialMovingAverage"
)
EMA_DENSE_RE = re.compile(EMA_DENSE_PATTERN)


def is_ema_dense(text: str) -> bool:
    return EMA_DENSE_RE.search(text) is not None


# --- files --------------------------------------------------------------------------------


def iter_files(root: Path, suffixes: Iterable[str] = (".py",)) -> Iterator[Path]:
    """Files under root with one of the suffixes, in a stable (sorted) order."""
    suffixes = tuple(suffixes)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for fn in sorted(filenames):
            if fn.endswith(suffixes):
                yield Path(dirpath) / fn


def count_lines(data: bytes) -> int:
    return len(data.splitlines())


@dataclass
class Counts:
    files: int = 0
    lines: int = 0
    bytes: int = 0

    def add(self, data: bytes) -> None:
        self.files += 1
        self.lines += count_lines(data)
        self.bytes += len(data)


def count_tree(root: Path, suffixes: Iterable[str] = (".py",)) -> Counts:
    counts = Counts()
    for path in iter_files(root, suffixes):
        counts.add(path.read_bytes())
    return counts


def build_view(
    dest: Path,
    sources: Iterable[tuple[str, Path]],
    keep: Callable[[Path], bool] | None = None,
) -> Counts:
    """Make dest a tree of hard links (or copies) of the .py files of the sources.

    sources are (folder name in the view, source root) pairs. keep filters files.
    The view is rebuilt from scratch each time (it is cheap: links, no copies).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    counts = Counts()
    for label, root in sources:
        for path in iter_files(root):
            if keep is not None and not keep(path):
                continue
            target = dest / label / path.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
            counts.add(path.read_bytes())
    return counts


def read_text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


# --- download and unpack ------------------------------------------------------------------


def safe_member(name: str) -> PurePosixPath | None:
    """A relative archive path with the top folder removed, or None if it is unsafe."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts:
        return None
    return p


def strip_top(parts: tuple[str, ...], is_sdist: bool) -> tuple[str, ...]:
    return parts[1:] if is_sdist and len(parts) > 1 else parts


def unpack(archive: Path, dest: Path, is_sdist: bool) -> int:
    """Extract kept files of archive into dest. Returns the number of files written."""
    written = 0

    def write(name: str, data: bytes) -> None:
        nonlocal written
        member = safe_member(name)
        if member is None or not member.name.endswith(KEEP_SUFFIXES):
            return
        parts = strip_top(member.parts, is_sdist)
        if not parts:
            return
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        written += 1

    if archive.name.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    write(info.filename, zf.read(info))
    else:
        with tarfile.open(archive) as tf:
            for ti in tf:
                if ti.isfile():
                    f = tf.extractfile(ti)
                    if f is not None:
                        write(ti.name, f.read())
    return written


def archive_kind(filename: str, pkg: Package) -> str | None:
    """ "sdist" or "wheel" if filename is an archive of pkg at its pinned version, else None."""
    name, sep, rest = filename.partition("-")
    if not sep or normalize(name) != normalize(pkg.name):
        return None
    if rest.startswith(pkg.version + "-") and rest.endswith(".whl"):
        return "wheel"
    if rest in (f"{pkg.version}{ext}" for ext in (".tar.gz", ".zip", ".tar.bz2", ".tgz")):
        return "sdist"
    return None


def find_archive(dist_dir: Path, pkg: Package) -> Path | None:
    """The downloaded archive of pkg: its pinned kind first, else a fallback wheel."""
    if not dist_dir.is_dir():
        return None
    found = {}
    for path in sorted(dist_dir.iterdir()):
        kind = archive_kind(path.name, pkg) if path.is_file() else None
        if kind is not None:
            found.setdefault(kind, path)
    return found.get(pkg.kind) or found.get("wheel")


def _pip_download_once(pkg: Package, dist_dir: Path, extra: list[str]) -> tuple[Path | None, str]:
    with tempfile.TemporaryDirectory(dir=dist_dir) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--ignore-requires-python",  # sources only: the local Python does not matter
            *extra,
            "-d",
            tmp,
            pkg.requirement,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        files = sorted(Path(tmp).iterdir())
        if proc.returncode != 0 or len(files) != 1:
            return None, (proc.stdout[-1500:] + proc.stderr[-1500:])
        final = dist_dir / files[0].name
        shutil.move(str(files[0]), final)
        return final, ""


def pip_download(pkg: Package, dist_dir: Path, log: Callable[[str], None]) -> Path:
    """Download pkg's archive into dist_dir.

    For an sdist pip also prepares its metadata; some old setup.py files fail in an
    isolated build environment (e.g. they import pkg_resources), so the sdist is tried
    again without build isolation, and a wheel is the last resort.
    """
    dist_dir.mkdir(parents=True, exist_ok=True)
    attempts: list[tuple[str, list[str]]] = []
    if pkg.kind == "sdist":
        attempts.append(("sdist", ["--no-binary", pkg.name]))
        attempts.append(
            ("sdist, no build isolation", ["--no-binary", pkg.name, "--no-build-isolation"])
        )
    attempts.append(("wheel", ["--only-binary", pkg.name]))
    errors = []
    for label, extra in attempts:
        log(f"  downloading {pkg.requirement} ({label})")
        path, err = _pip_download_once(pkg, dist_dir, extra)
        if path is not None:
            return path
        errors.append(f"--- {label}:\n{err}")
    raise RuntimeError(f"pip download {pkg.requirement} failed:\n" + "\n".join(errors))


@dataclass
class Fetched:
    package: Package
    path: Path  # unpacked source folder
    downloaded: bool  # True if this call hit the network


def ensure_package(pkg: Package, cache_dir: Path, log: Callable[[str], None]) -> Fetched:
    src = cache_dir / "src" / pkg.key
    marker = src / COMPLETE_MARKER
    if marker.is_file():
        return Fetched(pkg, src, downloaded=False)
    dist_dir = cache_dir / "dist"
    archive = find_archive(dist_dir, pkg)
    downloaded = archive is None
    if archive is None:
        archive = pip_download(pkg, dist_dir, log)
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    n = unpack(archive, src, is_sdist=not archive.name.endswith(".whl"))
    marker.write_text(
        json.dumps({"requirement": pkg.requirement, "archive": archive.name, "files": n}) + "\n"
    )
    log(f"  unpacked {archive.name}: {n} files kept")
    return Fetched(pkg, src, downloaded)


def ensure(
    packages: Iterable[Package],
    cache_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> list[Fetched]:
    """Download (once) and unpack every package. Returns one entry per package."""
    cache_dir = cache_dir or default_cache_dir()
    log = log or (lambda msg: print(msg, file=sys.stderr))
    return [ensure_package(p, cache_dir, log) for p in packages]


# --- CLI ----------------------------------------------------------------------------------


def format_counts_table(rows: list[tuple[Package, Counts, Counts]]) -> str:
    """A markdown table: package, version, kind, .py files, .py lines, other kept files."""
    out = [
        "| package | version | kind | .py files | .py lines | .ipynb/.yaml files |",
        "|---|---|---|---:|---:|---:|",
    ]
    total_f = total_l = total_o = 0
    for pkg, py, other in rows:
        out.append(
            f"| {pkg.name} | {pkg.version} | {pkg.kind} | {py.files:,} | {py.lines:,} "
            f"| {other.files:,} |"
        )
        total_f += py.files
        total_l += py.lines
        total_o += other.files
    out.append(f"| **total** | | | {total_f:,} | {total_l:,} | {total_o:,} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Download (once) and unpack the pinned corpus of training libraries.",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"cache folder (default: ${CACHE_ENV} or .bench-cache/ at the repository root)",
    )
    parser.add_argument(
        "--set",
        choices=["all", BENCH, ECOSYSTEM],
        default="all",
        help="which packages (default: all)",
    )
    parser.add_argument("--list", action="store_true", help="only list the pins")
    args = parser.parse_args(argv)

    pkgs = packages_for(args.set)
    if args.list:
        for p in pkgs:
            print(f"{p.requirement:32} {p.kind:6} {','.join(p.sets):16} {p.why}")
        return 0
    cache_dir = args.cache_dir or default_cache_dir()
    fetched = ensure(pkgs, cache_dir)
    rows = [
        (f.package, count_tree(f.path), count_tree(f.path, (".ipynb", ".yaml", ".yml")))
        for f in fetched
    ]
    print(f"cache: {cache_dir}")
    print(f"downloaded this run: {sum(f.downloaded for f in fetched)} of {len(fetched)}")
    print(format_counts_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
