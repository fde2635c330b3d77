"""The quality benchmark's scorer and ledger on a tiny synthetic manifest (no corpus needed)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.quality import ledger, manifest, scoring
from benchmarks.quality.linter import Finding, _parse_output

HEADER = "repo\tcommit\tpath\tapi\tverdict\tnotes\n"
ROWS = [
    "a/clean\t"
    + "0" * 40
    + "\ttrain.py\ttimm ModelEma: x\tclean\tExpect no findings. Traps: decay 0.99 (EMA101 trap).",
    "a/ok\t" + "0" * 40 + "\ttrain.py\thand-written PyTorch: y\tclean\t"
    "Expect no findings. Acceptable: L23: EMA101 for the 0.99 of a short run. Traps: none.",
    "b/buggy\t" + "1" * 40 + "\tmain.py\ttorch swa_utils: z\tbuggy\t"
    "Expect: L100: EMA207 copy of the DDP model (L90-92; see L95); L200|L210: "
    "EMA105|EMA201 bf16 copy. "
    "Provenance: read at HEAD.",
    "c/amb\t"
    + "2" * 40
    + "\tx.py\tTF/Keras: w\tbuggy\t[ambiguous] Expect: L10: EMA203 maybe. Traps: none.",
]


def _manifest(tmp_path: Path) -> list[manifest.Row]:
    p = tmp_path / "manifest.tsv"
    p.write_text(HEADER + "\n".join(ROWS) + "\n", encoding="utf-8")
    return manifest.load(p)


def test_manifest_items_alternatives_and_flags(tmp_path: Path) -> None:
    rows = _manifest(tmp_path)
    assert [r.key for r in rows] == [
        "a__clean/train.py",
        "a__ok/train.py",
        "b__buggy/main.py",
        "c__amb/x.py",
    ]
    buggy = rows[2]
    assert [i.label() for i in buggy.expected] == ["L100: EMA207", "L200|L210: EMA105|EMA201"]
    assert rows[1].acceptable[0].label() == "L23: EMA101"
    assert rows[0].expected == [] and rows[0].acceptable == []
    assert rows[3].ambiguous and not buggy.ambiguous
    assert buggy.family == "torch swa_utils"


def test_scorer_counts_tp_fp_misses(tmp_path: Path) -> None:
    rows = _manifest(tmp_path)
    findings = [
        Finding("a__clean/train.py", 5, 1, "EMA101"),  # FP on a clean file
        Finding("a__ok/train.py", 25, 1, "EMA101"),  # acceptable (within 3 lines)
        Finding("b__buggy/main.py", 103, 1, "EMA207"),  # TP at +3
        Finding("b__buggy/main.py", 104, 1, "EMA207"),  # second finding, item used once: FP
        Finding("b__buggy/main.py", 214, 1, "EMA105"),  # 4 lines from L210: not a match, FP
        Finding("c__amb/x.py", 10, 1, "EMA203"),  # ambiguous: apart
    ]
    s = scoring.score(rows, findings)
    o = s.overall()
    assert (o.tp, o.acceptable, o.fp, o.missed) == (1, 1, 3, 1)
    assert o.precision == 2 / 5 and o.recall == 1 / 2
    rules = s.per_rule()
    assert (rules["EMA207"].tp, rules["EMA207"].fp) == (1, 1)
    assert rules["EMA105"].missed == 1 and rules["EMA105"].fp == 1
    assert s.clean_files() == (2, 1, 1)
    assert s.buggy_files() == (1, 1)
    assert len(s.ambiguous) == 1 and len(s.ambiguous[0].matched) == 1


def test_alternative_line_and_code_match(tmp_path: Path) -> None:
    rows = _manifest(tmp_path)
    s = scoring.score(rows, [Finding("b__buggy/main.py", 208, 1, "EMA201")])
    fs = next(f for f in s.files if f.row.key == "b__buggy/main.py")
    assert [i.label() for i, _ in fs.matched] == ["L200|L210: EMA105|EMA201"]
    assert s.overall().fp == 0


def test_missing_files_are_listed_not_scored(tmp_path: Path) -> None:
    rows = _manifest(tmp_path)
    s = scoring.score(rows, [], present={"a__clean/train.py"})
    assert {r.key for r in s.missing_files} == {"a__ok/train.py", "b__buggy/main.py", "c__amb/x.py"}


def test_ledger_keys_survive_line_moves(tmp_path: Path) -> None:
    p = tmp_path / "ledger.tsv"
    entries = [
        ledger.Entry(
            "corpus", "a/x.py", "EMA101", 10, "ema = EMA(model, beta=0.9)", "false", "short run"
        ),
        ledger.Entry(
            "corpus", "a/x.py", "EMA201", 30, "ema = deepcopy(model).cpu()", "true", "cpu copy"
        ),
    ]
    ledger.write(p, entries)
    loaded = ledger.load(p)
    assert loaded == sorted(entries, key=lambda e: (e.source, e.file, e.line, e.code))
    findings = [
        Finding("a/x.py", 14, 1, "EMA101", anchor="ema = EMA(model,   beta=0.9)"),  # moved 4 lines
        Finding("a/x.py", 50, 1, "EMA999", anchor="new"),
    ]
    r = ledger.review("corpus", findings, loaded)
    assert [e.verdict for _, e in r.reviewed] == ["false"]
    assert [f.code for f in r.unreviewed] == ["EMA999"]
    assert [e.code for e in r.stale] == ["EMA201"]
    assert r.precision == 0.0
    row = ledger.format_row("corpus", findings[1])
    assert row.split("\t") == ["corpus", "a/x.py", "EMA999", "50", "new", "?", ""]


def test_cli_output_parsing_json_and_concise() -> None:
    js = (
        '{"diagnostics": [{"code": "EMA101", "message": "m", "path": "/t/a.py", "cell": null,'
        ' "location": {"line": 3, "column": 5}}]}'
    )
    assert _parse_output(js)[0]["line"] == 3
    concise = "/t/a.py:7:1: EMA202 update every micro-batch\nFound 1 error."
    rows = _parse_output(concise)
    assert [(r["path"], r["line"], r["code"]) for r in rows] == [("/t/a.py", 7, "EMA202")]


def test_the_framework_of_a_mutated_file_comes_from_its_imports() -> None:
    from benchmarks.quality.report import framework

    assert framework("import jax\nimport jax.numpy as jnp\n") == "JAX"
    assert framework("from flax import struct\n") == "JAX"
    assert framework("import tensorflow as tf\n") == "TensorFlow"
    assert framework("import torch\n# import jax in a comment is not an import\n") == "PyTorch"
