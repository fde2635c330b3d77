"""The floor for any libcst-based linter: parse every file, nothing else.

Usage: python benchmarks/libcst_parse.py PATH [PATH ...]

Each ``*.py`` file under the paths (sorted) is read as bytes and handed to
``libcst.parse_module``; no metadata, no visitor. Prints one summary line and the
files that failed to parse. Exit 0 even when some files fail (they are counted).
"""

from __future__ import annotations

import os
import sys
import time


def iter_py(paths: list[str]):
    for root in paths:
        if os.path.isfile(root):
            yield root
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(".py"):
                    yield os.path.join(dirpath, fn)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    from importlib.metadata import version

    import libcst

    start = time.perf_counter()
    files = lines = 0
    failed: list[str] = []
    for path in iter_py(argv):
        with open(path, "rb") as fh:
            data = fh.read()
        files += 1
        lines += len(data.splitlines())
        try:
            libcst.parse_module(data)
        except Exception as exc:  # parse errors and the odd encoding problem
            failed.append(f"{path}: {type(exc).__name__}")
    elapsed = time.perf_counter() - start
    print(
        f"libcst {version('libcst')}: "
        f"parsed {files} files, {lines} lines, {len(failed)} failed, {elapsed:.2f} s"
    )
    for line in failed:
        print(f"  parse failed: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
