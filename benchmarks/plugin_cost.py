"""What the flake8 plugin itself costs on a folder, phase by phase (CPU seconds, one process).

``benchmarks/run.py`` compares whole flake8 runs (``--select F,EMA`` against ``--select F``
without ema-lint), which on the corpus take minutes each and mix the plugin's cost with
pyflakes' and pycodestyle's. This script replays what a flake8 worker asks of the plugin
(the file's lines in, ``run()`` out) and splits it: importing the plugin and compiling the
pre-filter, the scan of every file, importing the engine (libcst and the rules, paid once
per flake8 worker), and the files that are linted::

    python benchmarks/plugin_cost.py FOLDER [--repeat 3]

Each repetition runs in a fresh interpreter (imports are part of the cost); the medians are
printed. It measures the ema-lint that the interpreter imports (``-P``: not the current
folder's); compare two checkouts by running it with each on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import json, sys, time
from pathlib import Path

files = sorted(str(p) for p in Path(sys.argv[1]).rglob("*.py"))
texts = []
for name in files:
    with open(name, encoding="utf-8", errors="replace") as handle:
        texts.append((name, handle.read().splitlines(True)))
start = time.process_time()
from ema_lint import flake8_plugin, registry

registry.default_prefilter().prepare()
imported = time.process_time()
linted = findings = 0
engine_import = 0.0
for name, lines in texts:
    had_engine = "ema_lint.engine" in sys.modules
    before = time.process_time()
    found = list(flake8_plugin.EmaLintChecker(None, name, lines).run())
    if not had_engine and "ema_lint.engine" in sys.modules:
        engine_import = time.process_time() - before
    findings += len(found)
end = time.process_time()
print(json.dumps({
    "files": len(texts),
    "import": imported - start,
    "files_cpu": end - imported,
    "first_engine_file": engine_import,
    "total": end - start,
    "findings": findings,
    "libcst": "libcst" in sys.modules,
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run(
            [sys.executable, "-P", "-c", _CHILD, str(args.folder)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout))
    first = runs[0]
    print(f"{first['files']} files, {first['findings']} findings, libcst: {first['libcst']}")
    for key, label in (
        ("import", "import the plugin, compile the pre-filter"),
        ("files_cpu", "run() on every file"),
        ("first_engine_file", "  of which the first file that imports the engine"),
        ("total", "total"),
    ):
        values = [run[key] for run in runs]
        print(f"{label:50s} {statistics.median(values):8.3f} s CPU (median of {len(values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
