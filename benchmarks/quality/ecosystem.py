"""The ecosystem packages (scripts/corpus.py): their folders, and the files worth mutating."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ema_lint.analysis.syntax.test_code import is_test_module

REPO_ROOT = Path(__file__).resolve().parents[2]
AVERAGING_RE = re.compile(
    r"(?:\b|_)(?:ema|EMA|Ema|swa|SWA|Swa)(?:\b|_|[A-Z0-9])|AveragedModel|update_bn|ExponentialMovingAverage"
    r"|polyak|teacher|SWALR"
)


def package_dirs(cache_dir: Path | None = None) -> list[tuple[str, Path]]:
    """(name-version, folder) of every ecosystem package, fetched once into the cache."""
    sys.path.insert(0, str(REPO_ROOT / "scripts"))
    try:
        import corpus  # scripts/corpus.py
    finally:
        sys.path.pop(0)
    fetched = corpus.ensure(corpus.packages_for("ecosystem"), cache_dir)
    return [(f.package.key, Path(f.path)) for f in fetched]


def averaging_files(roots: list[tuple[str, Path]], limit: int) -> list[tuple[str, Path]]:
    """The .py files that mention averaging most: at most ``limit`` (key, path), stable order."""
    scored = []
    for key, root in roots:
        for p in sorted(root.rglob("*.py")):
            try:
                text = p.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            hits = len(AVERAGING_RE.findall(text))
            # Unit tests are not mutated: their decays and arithmetic are test oracles
            # chosen for a few updates, which the value rules do not judge by design.
            if is_test_module(p.relative_to(root).as_posix()):
                continue
            if hits and len(text) < 200_000:
                scored.append((-hits, f"{key}/{p.relative_to(root).as_posix()}", p))
    scored.sort()
    return [(k, p) for _, k, p in scored[:limit]]
