"""The whole benchmark command on a synthetic two-file corpus (ema-lint run as a subprocess)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.quality import cli

CLEAN = """\
import copy
import torch


def train(model, loader, optimizer):
    model = model.cuda()
    ema = copy.deepcopy(model)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.999).add_(p, alpha=0.001)
    return ema
"""

BUGGY = """\
from timm.utils import ModelEmaV2


def make(model):
    return ModelEmaV2(model, decay=1.0)
"""


def test_end_to_end_on_a_synthetic_corpus(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "corpus"
    (folder / "me__clean").mkdir(parents=True)
    (folder / "me__buggy").mkdir(parents=True)
    (folder / "me__clean" / "train.py").write_text(CLEAN, encoding="utf-8")
    (folder / "me__buggy" / "ema.py").write_text(BUGGY, encoding="utf-8")
    manifest = tmp_path / "manifest.tsv"
    manifest.write_text(
        "repo\tcommit\tpath\tapi\tverdict\tnotes\n"
        f"me/clean\t{'0' * 40}\ttrain.py\thand-written PyTorch: loop\tclean\tExpect no findings.\n"
        f"me/buggy\t{'0' * 40}\tema.py\ttimm ModelEma: V2\tbuggy\t"
        "Expect: L5: EMA102 decay 1.0 never moves. Provenance: synthetic.\n"
        f"me/gone\t{'0' * 40}\tx.py\ttimm ModelEma: V2\tclean\tExpect no findings.\n",
        encoding="utf-8",
    )
    out = tmp_path / "results.md"
    ledger = tmp_path / "ledger.tsv"
    ledger.write_text(
        "source\tfile\tcode\tline\tanchor\tverdict\treason\n"
        "corpus\tme__clean/train.py\tEMA999\t3\tgone\tfalse\tno longer reported\n",
        encoding="utf-8",
    )
    code = cli.main(
        [
            str(manifest),
            str(folder),
            "--no-ecosystem",
            "--output",
            str(out),
            "--ledger",
            str(ledger),
            "--new-findings",
        ]
    )
    assert code == 0
    text = out.read_text(encoding="utf-8")
    assert "| real-bug recall (expected items matched) | 1/1 = 1.00 |" in text
    assert "`me__gone/x.py`" in text  # missing files are named
    assert "`corpus` `me__clean/train.py:3` EMA999 `gone`" in text  # a stale ledger row
    assert "## Mutants" in text and "over 1 files" in text
    printed = capsys.readouterr().out
    assert (
        "corpus\tme__buggy/ema.py\tEMA102\t5\treturn ModelEmaV2(model, decay=1.0)\t?\t" in printed
    )
