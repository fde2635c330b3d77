"""Is the analysis linear in the module's size? Times ema-lint on growing modules.

Usage: python benchmarks/concat.py [--copies 1,2,4,8,16,32] [--objects 250,500,1000,2000]
       [--file PATH] [--repeat N]

Series 1 concatenates a training file N times in one module (by default the synthetic one
of ``benchmarks/training_file.py``; ``--file`` takes a real one, e.g. from the benchmark
corpus) and times, in CPU seconds of this process, a bare libcst parse and ema-lint's
analysis of the parsed module (index, facts, rules, positions, noqa) with every default
rule; then the same copies with each copy's top-level functions and classes renamed
(``renamed_copies``: a plain concatenation defines every name N times, so that each call
may run any of N definitions). Series 2 grows the number of averaging objects in one
function. Linear means the
analysis time per line (and per object) stays flat; ``growth`` is each row's time per line
over the first row's, next to the bare parse's own growth (on a 2-core machine the parse of
a 6,000-line module already costs more per line than a 200-line one's: memory, not
algorithm; an analysis that keeps ``analysis / parse`` flat is as linear as its parser).
Prints the tables as Markdown; ``--json`` prints them as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from training_file import TRAINING_FILE, averaging_objects_file


def _cpu(function, repeat: int) -> tuple[float, object]:
    """Least CPU time of ``repeat`` runs. Each starts from a collected heap and runs on the
    collector schedule the command uses (``ema_lint.collector``): otherwise the trees of
    earlier rows make each later row pay for collections of a larger heap, and the series
    measures the collector rather than the analysis."""
    from ema_lint.collector import batch_collection

    best = float("inf")
    result = None
    for _ in range(repeat):
        result = None
        gc.collect()
        with batch_collection():
            start = time.process_time()
            result = function()
            best = min(best, time.process_time() - start)
    return best, result


def measure(text: str, repeat: int) -> dict[str, float]:
    """CPU seconds of a bare parse and of the analysis of the parsed module."""
    import libcst

    from ema_lint import engine
    from ema_lint.file_settings import FileSettings
    from ema_lint.registry import default_codes

    settings = FileSettings(codes=sorted(default_codes()), prefilter=False)
    data = text.encode()
    parse_s, module = _cpu(lambda: libcst.parse_module(data), repeat)
    analysis_s, analysis = _cpu(
        lambda: engine.analyze(data, "train.py", settings, module=module), repeat
    )
    return {
        "lines": text.count("\n"),
        "parse_s": parse_s,
        "analysis_s": analysis_s,
        "findings": len(analysis.diagnostics),  # type: ignore[attr-defined]
    }


def series(texts: list[tuple[int, str]], repeat: int) -> list[dict[str, float]]:
    rows = []
    for n, text in texts:
        # Small rows are the denominator of every growth figure and take milliseconds, where
        # a 2-core machine's noise is largest: they take the least of more runs.
        row = {"n": n, **measure(text, max(repeat, 32 // n))}
        rows.append(row)
    base = rows[0]["analysis_s"] / rows[0]["lines"]
    parse_base = rows[0]["parse_s"] / rows[0]["lines"]
    for row in rows:
        row["us_per_line"] = 1e6 * row["analysis_s"] / row["lines"]
        row["growth"] = (row["analysis_s"] / row["lines"]) / base
        row["parse_growth"] = (row["parse_s"] / row["lines"]) / parse_base
        row["vs_parse"] = row["analysis_s"] / row["parse_s"]
    return rows


def table(title: str, unit: str, rows: list[dict[str, float]]) -> str:
    out = [
        f"| {unit} | lines | parse CPU s | analysis CPU s | analysis / parse "
        "| µs per line | growth per line | parse growth per line | findings |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['n']} | {r['lines']:,} | {r['parse_s']:.3f} | {r['analysis_s']:.3f} "
            f"| {r['vs_parse']:.2f}x | {r['us_per_line']:.1f} | {r['growth']:.2f}x "
            f"| {r['parse_growth']:.2f}x | {r['findings']} |"
        )
    return f"{title}\n\n" + "\n".join(out)


_DEFINED = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)


def renamed_copies(source: str, n: int) -> str:
    """``n`` copies of ``source`` in which copy ``i`` renames the functions and classes it
    defines at the top level (``train`` -> ``train_2``): a module that grows by new code.
    A plain concatenation defines each name ``n`` times, and every call of ``f`` may then
    run any of the ``n`` definitions of ``f``: the pairs an analysis must weigh grow as
    ``n`` squared, which no real module asks of it."""
    names = sorted(set(_DEFINED.findall(source)), key=len, reverse=True)
    if not names:
        return source * n
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return "".join(
        source if i == 1 else pattern.sub(lambda m, i=i: f"{m.group(1)}_{i}", source)
        for i in range(1, n + 1)
    )


def run(copies: list[int], objects: list[int], source: str, repeat: int) -> dict:
    measure(source, 1)  # imports the rules and warms the caches: not part of any row
    concat = series([(n, source * n) for n in copies], repeat)
    renamed = series([(n, renamed_copies(source, n)) for n in copies], repeat)
    many = series([(n, averaging_objects_file(n)) for n in objects], repeat) if objects else []
    return {"concatenations": concat, "renamed_copies": renamed, "averaging_objects": many}


def markdown(result: dict, source_name: str) -> str:
    parts = [
        table(
            f"Concatenations of {source_name} in one module (CPU s, min of runs):",
            "copies",
            result["concatenations"],
        ),
        table(
            "The same copies, each renaming the functions and classes it defines (a module "
            "that grows by new code rather than by redefining the same names):",
            "copies",
            result["renamed_copies"],
        ),
    ]
    if result["averaging_objects"]:
        parts.append(
            table(
                "Averaging objects created and updated in one function:",
                "objects",
                result["averaging_objects"],
            )
        )
    return "\n\n".join(parts)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="1,2,4,8,16,32", type=_ints)
    parser.add_argument("--objects", default="250,500,1000,2000", type=_ints)
    parser.add_argument("--file", help="a training file to concatenate (default: synthetic)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.file:
        with open(args.file, encoding="utf-8") as handle:
            source, name = handle.read(), os.path.basename(args.file)
        if not source.endswith("\n"):
            source += "\n"
    else:
        source, name = TRAINING_FILE, "the synthetic training file (benchmarks/training_file.py)"
    result = run(args.copies, args.objects, source, args.repeat)
    print(json.dumps(result, indent=2) if args.json else markdown(result, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
