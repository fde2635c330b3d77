"""The sources a cold ema-lint run hands to libcst, written out as files.

Usage: python benchmarks/parsed_sources.py OUT PATH [PATH ...]

Runs ``ema-lint check`` in this process (one job, no cache) over the paths, recording every
source given to ``libcst.parse_module`` (the files the pre-filter and the project model let
through, and the project modules summarised for them), and writes each distinct one to
``OUT/NNNNN.py``. The benchmark then times a bare libcst parse of that folder: the floor of
ema-lint's cold run for as long as it parses those files with libcst, whatever its analysis
costs. Prints the number of files written. Runs in the ema-lint environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import sys
from pathlib import Path


def record(paths: list[str]) -> list[bytes]:
    """The distinct sources parsed by one cold run over ``paths``, in the order parsed."""
    import libcst

    from ema_lint.cli import main

    seen: dict[str, bytes] = {}
    original = libcst.parse_module

    def parse_module(source, *args, **kwargs):  # type: ignore[no-untyped-def]
        data = source.encode("utf-8", "surrogatepass") if isinstance(source, str) else source
        seen.setdefault(hashlib.sha256(data).hexdigest(), data)
        return original(source, *args, **kwargs)

    argv = ["check", "--no-cache", "--jobs", "1", "--isolated", "--exit-zero", "--quiet"]
    argv += ["--no-respect-gitignore", *paths]
    libcst.parse_module = parse_module
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(argv)
    finally:
        libcst.parse_module = original
    return list(seen.values())


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    sources = record(argv[1:])
    for number, data in enumerate(sources):
        (out / f"{number:05d}.py").write_bytes(data)
    print(len(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
