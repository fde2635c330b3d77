"""Run the evidence experiments and write their tables and plots.

Each experiment folder ``docs/evidence/<CODE>/`` holds ``buggy.py`` (training
code with the bug) and ``fixed.py`` (the same code as the fix leaves it). Both
scripts are imported by path and their ``main(seed, ...)`` is called for a few
seeds; the per-epoch validation accuracy they return is turned into
``results.md``, ``results.json`` and ``plot.png`` in the same folder, and the
summary table of ``docs/evidence/README.md`` is rebuilt.

    python docs/evidence/run_all.py                 # everything (a few minutes)
    python docs/evidence/run_all.py --only EMA202   # one experiment
    python docs/evidence/run_all.py --quick         # smoke run, output to a temp dir
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import difflib
import importlib.util
import io
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import common  # noqa: E402
import torch  # noqa: E402
from common import TensorLoader  # noqa: E402
from torch.optim.swa_utils import update_bn  # noqa: E402

SEEDS = (0, 1, 2)
QUICK_SEEDS = (0, 1)
VARIANTS = ("buggy", "fixed")
README_START = "<!-- summary:start -->"
README_END = "<!-- summary:end -->"


@dataclasses.dataclass(frozen=True)
class Experiment:
    code: str
    name: str
    title: str
    bug: str
    fix: str
    setup: str
    notes: str = ""
    quick_epochs: int = 1
    # ``--quick`` also shortens the epochs of some experiments (None: full data).
    quick_train_samples: int | None = None
    # SWA experiments take their length from module constants (EPOCHS,
    # SWA_START) and report the averaged model only after the loop; for their
    # per-epoch curves the runner evaluates a copy of the SWA model at the end
    # of every epoch, recalibrating its BatchNorm statistics first when the
    # script does so after its loop.
    swa: bool = False
    recalibrate: tuple[bool, bool] = (False, False)
    online_differs: bool = False


MIXTURE_DATA = (
    " Data: synthetic 10-class Gaussian mixture (3 clusters per class, 32 features),"
    " 20,480 training samples with 30 % random labels, clean validation set of 4,096;"
    " see `../common.py`."
)
SPIRAL_DATA = (
    " Data: three interleaved 2-D spirals (3 turns, 3 classes, clean labels), 4,096"
    " training and 4,096 validation samples; see `../common.py`."
)

EXPERIMENTS: dict[str, Experiment] = {
    e.code: e
    for e in [
        Experiment(
            code="EMA101",
            name="ema-decay-out-of-range",
            title="EMA decay 0.9, far below the usual 0.999-0.9999",
            bug=(
                "`AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))`: a decay of"
                " 0.9 averages over about 10 optimizer steps, so the EMA follows the noisy"
                " online weights almost step for step and removes little of their noise."
            ),
            fix=(
                "Unsafe automatic fix (`--unsafe-fixes`): the decay literal moves to the"
                " nearest bound of the accepted range, 0.9 -> 0.999."
            ),
            setup=(
                "MLP (2 hidden layers of 128, BatchNorm), SGD with constant lr 0.2,"
                " momentum 0.9, weight decay 5e-4, batch 32, 6 epochs of 640 steps"
                " (3,840 optimizer steps). EMA updated after every optimizer step,"
                " buffers averaged too (`use_buffers=True`)." + MIXTURE_DATA
            ),
        ),
        Experiment(
            code="EMA102",
            name="ema-decay-invalid",
            title="EMA decay 1.0: the average never moves",
            bug=(
                "`get_ema_multi_avg_fn(1.0)`: each update keeps 100 % of the old average and"
                " 0 % of the new weights, so the EMA model stays at the weights it was"
                " created with (the random initialisation)."
            ),
            fix=(
                "No automatic fix (the intended decay cannot be guessed); `fixed.py` uses"
                " 0.999, written by hand."
            ),
            setup=(
                "Same training as EMA101: MLP with BatchNorm, SGD lr 0.2, batch 32,"
                " 3,840 optimizer steps, `use_buffers=True`." + MIXTURE_DATA
            ),
        ),
        Experiment(
            code="EMA202",
            name="ema-update-ignores-accumulation",
            title="EMA updated on every micro-batch under gradient accumulation (8)",
            bug=(
                "With `accum_steps = 8` the optimizer steps once every 8 micro-batches, but"
                " `ema_model.update_parameters(model)` runs on every micro-batch. The"
                " weights do not change between optimizer steps, so each step is averaged"
                " in 8 times: the EMA behaves as if its decay were 0.999^8 = 0.992, an"
                " 8x shorter horizon than configured."
            ),
            fix=(
                "Automatic fix: the update moves into the `if (step + 1) % accum_steps == 0:`"
                " block, directly after `optimizer.step()`."
            ),
            setup=(
                "MLP with BatchNorm, micro-batches of 8, `accum_steps = 8` (effective batch"
                " 64), SGD lr 0.2, momentum 0.9, no weight decay, 12 epochs over 8,192"
                " training samples = 12,288 micro-batches = 1,536 optimizer steps, EMA"
                " decay 0.999, `use_buffers=True`."
                " Data: the Gaussian mixture of EMA101 (30 % random labels), with 8,192"
                " training samples; see `../common.py`."
            ),
            quick_train_samples=2048,
            notes=(
                "How to read it: between optimizer steps the weights do not change, so eight"
                " updates per step are one update with decay 0.999^8 ≈ 0.992: the buggy"
                " average remembers about 125 optimizer steps instead of 1,000. A short"
                " memory also forgets the random initial weights sooner, so in the first"
                " two thirds of this run the buggy average is ahead. Once the configured"
                " EMA has seen about 1,000 optimizer steps it catches up and ends ahead on"
                " every seed, but the final gap is a fraction of a point, within the"
                " seed-to-seed spread. In this setting the measurable harm is therefore"
                " small: the bug silently gives an EMA that is not the one configured (an"
                " 8x shorter horizon, close to the online model), and the configured"
                " horizon pays off only in runs that are long compared with it. A 0.999 EMA"
                " is meant for runs of many thousand optimizer steps; with 8 micro-batches"
                " per step such a run does not fit the two-minute CPU budget of these"
                " experiments."
            ),
        ),
        Experiment(
            code="EMA204",
            name="averaged-model-in-train-mode",
            title="EMA model validated in train mode",
            bug=(
                "`AveragedModel` deep-copies the model in train mode, and `evaluate()` does"
                " not switch modes. The live model gets `model.eval()` before its"
                " validation, the EMA model gets nothing, so it is validated with Dropout"
                " active and BatchNorm normalising each validation batch by its own"
                " statistics."
            ),
            fix="Automatic fix: `ema_model.eval()` inserted directly before the validation call.",
            setup=(
                "MLP with BatchNorm and Dropout(0.3), validation batches of 32 (small"
                " batches make train-mode BatchNorm statistics noisy), SGD lr 0.05, batch 32,"
                " 6 epochs, EMA decay 0.999, `use_buffers=True`." + MIXTURE_DATA
            ),
            notes=(
                "Dropout in the buggy train-mode validation draws from the global random"
                " generator, so after the first epoch the two runs' online models see"
                " different dropout masks; their online accuracies differ slightly for that"
                " reason only (see the table)."
            ),
        ),
        Experiment(
            code="EMA301",
            name="ema-update-not-in-place",
            title="hand-written EMA update rebinds its loop variable",
            bug=(
                "`for e, p in zip(...): e = decay * e + (1 - decay) * p` builds a new tensor"
                " and binds it to the name `e`; the EMA parameter itself is never written."
                " The EMA model keeps its initial (random) weights while its BatchNorm"
                " buffers are copied from the live model."
            ),
            fix="Automatic fix: `e.copy_(decay * e + (1 - decay) * p)`.",
            setup=(
                "Hand-made EMA (`copy.deepcopy(model)`, decay 0.999, buffers copied with"
                " `eb.copy_(b)`), same training as EMA101 (MLP with BatchNorm, SGD lr 0.2,"
                " batch 32, 3,840 steps)." + MIXTURE_DATA
            ),
        ),
        Experiment(
            code="EMA302",
            name="ema-coefficients-swapped",
            title="hand-written EMA update with swapped coefficients",
            bug=(
                "`e.mul_(1 - decay).add_(p, alpha=decay)` keeps 0.1 % of the average and"
                ' takes 99.9 % of the new weights: the "EMA" is the online model with a'
                " one-step lag, so it brings none of the benefit of averaging."
            ),
            fix="Automatic fix: `e.mul_(decay).add_(p, alpha=1 - decay)`.",
            setup=(
                "Hand-made EMA (`copy.deepcopy(model)`, decay 0.999, buffers copied with"
                " `eb.copy_(b)`), same training as EMA101 (MLP with BatchNorm, SGD lr 0.2,"
                " batch 32, 3,840 steps)." + MIXTURE_DATA
            ),
            notes=(
                "The buggy average and the online model have the same accuracy at every epoch"
                " (the two curves lie on top of each other): with 99.9 % of each update taken"
                ' from the new weights, the "EMA" is the online model. The correct EMA starts'
                " lower in the first epoch, while it still carries about half the weight of "
                "its starting point (0.999^640 ≈ 0.53), and is ahead from the second epoch "
                "on."
            ),
        ),
        Experiment(
            code="EMA401",
            name="swa-missing-update-bn",
            title="SWA model used without update_bn",
            bug=(
                "`AveragedModel(model)` averages the weights but, by default, copies the"
                " BatchNorm running statistics from the live model at each update. Without"
                " `update_bn` the averaged weights are used with statistics measured on"
                " different (the last epoch's) weights."
            ),
            fix=(
                "Automatic fix: `torch.optim.swa_utils.update_bn(train_loader, swa_model)`"
                " inserted directly after the epoch loop."
            ),
            setup=(
                "The loop of the PyTorch SWA documentation: SGD lr 0.1 (momentum 0.9,"
                " weight decay 5e-4) with cosine annealing, then after epoch"
                " `SWA_START = 30` (of 40) `SWALR(swa_lr=0.05, anneal_epochs=3)` and one"
                " `update_parameters` per epoch. MLP with 3 hidden layers of 128, each"
                " followed by BatchNorm, batch 64 (64 steps per epoch)." + SPIRAL_DATA
            ),
            notes=(
                "Both scripts evaluate the SWA model only after the loop, as the"
                " documentation does; those final numbers are the table. For the per-epoch"
                " curves the runner evaluates a copy of the SWA model at the end of each"
                " epoch once averaging has begun: as it is for the buggy curve, and after"
                " `update_bn` on the copy for the fixed curve (what each script would"
                " report had training stopped there). Training is identical in both"
                " scripts, so the online curves coincide. When averaging starts, `SWALR`"
                " raises the learning rate from the cosine schedule's ≈0.015 to"
                " `swa_lr = 0.05`, so the online model gets worse while the SWA average"
                " (recalibrated) improves: the usual SWA recipe of averaging the iterates of"
                " a higher, constant learning rate."
            ),
            quick_epochs=8,
            quick_train_samples=2048,
            swa=True,
            recalibrate=(False, True),
        ),
        Experiment(
            code="EMA402",
            name="swa-started-too-early",
            title="SWA started at epoch 0",
            bug=(
                "`SWA_START = 0`: the equal-weight SWA average includes the weights of the"
                " first epochs, far from where training ends up, and `SWALR` replaces the"
                " main learning-rate schedule from the first epoch."
            ),
            fix=(
                "Unsafe automatic fix (`--unsafe-fixes`): the start moves to 75 % of the"
                " run, `SWA_START = 30` for `EPOCHS = 40`."
            ),
            setup=(
                "Same loop and model as EMA401 but with `update_bn` after the loop in both"
                " scripts and `if epoch >= SWA_START:`: SGD lr 0.1 with cosine annealing"
                " until `SWA_START`, then `SWALR(swa_lr=0.05, anneal_epochs=3)` and one"
                " `update_parameters` per epoch, 40 epochs." + SPIRAL_DATA
            ),
            notes=(
                "The two scripts train differently (the start also decides when `SWALR`"
                " takes over the learning rate), so both online curves are shown. For the"
                " per-epoch averaged curves the runner evaluates a copy of the SWA model"
                " after `update_bn` at the end of each epoch, as both scripts do after their"
                " loop. The buggy run trains at `swa_lr` from"
                " the start instead of following the cosine schedule, but both online models"
                " end at about the same accuracy; the gap is the averaging itself: the buggy"
                " run's SWA model ends about 10 points below its own online model, because"
                " it gives the first, poor epochs the same weight as the last ones."
            ),
            quick_epochs=8,
            quick_train_samples=2048,
            swa=True,
            recalibrate=(True, True),
            online_differs=True,
        ),
    ]
}


# --------------------------------------------------------------------------
# running


def load_script(code: str, variant: str):
    path = HERE / code / f"{variant}.py"
    spec = importlib.util.spec_from_file_location(f"evidence_{code}_{variant}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_swa_probe(module, recalibrate: bool):
    """Per-epoch evaluation of a copy of the SWA model (NaN before averaging)."""
    curve: list[float] = []

    def on_epoch_end(epoch, swa_model, train_loader, val_loader):
        if int(swa_model.n_averaged) == 0:
            curve.append(math.nan)
            return
        with torch.random.fork_rng():
            probe = copy.deepcopy(swa_model)
            if recalibrate:
                ordered = TensorLoader(train_loader.x, train_loader.y, train_loader.batch_size)
                update_bn(ordered, probe)
            probe.eval()
            curve.append(module.evaluate(probe, val_loader))

    return curve, on_epoch_end


def run_one(code: str, variant: str, seed: int, quick: bool, verbose: bool) -> dict:
    exp = EXPERIMENTS[code]
    torch.set_num_threads(1)
    common.MAX_TRAIN_SAMPLES = exp.quick_train_samples if quick else None
    module = load_script(code, variant)
    kwargs = {}
    curve = None
    if exp.swa:
        if quick:
            full = module.EPOCHS
            module.EPOCHS = exp.quick_epochs
            module.SWA_START = round(module.SWA_START * exp.quick_epochs / full)
        curve, kwargs["on_epoch_end"] = make_swa_probe(
            module, exp.recalibrate[VARIANTS.index(variant)]
        )
    elif quick:
        kwargs["epochs"] = exp.quick_epochs

    sink = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    start = time.perf_counter()
    cpu_start = time.process_time()
    with sink:
        history = module.main(seed, **kwargs)
    seconds = time.perf_counter() - start
    cpu_seconds = time.process_time() - cpu_start

    online = [float(v) for v in history["online"]]
    if exp.swa:
        averaged = [float(v) for v in curve]
        final_averaged = float(history["final_averaged"])
    else:
        averaged = [float(v) for v in history["averaged"]]
        final_averaged = averaged[-1]
    return {
        "variant": variant,
        "seed": seed,
        "online": online,
        "averaged": averaged,
        "final_online": online[-1],
        "final_averaged": final_averaged,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }


def _run_one_star(args):
    return run_one(*args)


def run_experiment(
    code: str,
    quick: bool = False,
    out_dir: Path | None = None,
    seeds=None,
    jobs: int = 1,
    verbose: bool = False,
) -> dict:
    """Run both scripts of one experiment over the seeds and write its outputs."""
    exp = EXPERIMENTS[code]
    seeds = tuple(seeds if seeds is not None else (QUICK_SEEDS if quick else SEEDS))
    tasks = [(code, v, s, quick, verbose) for v in VARIANTS for s in seeds]
    start = time.perf_counter()
    if jobs > 1:
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            runs = list(pool.map(_run_one_star, tasks))
    else:
        runs = [run_one(*t) for t in tasks]
    wall = time.perf_counter() - start

    result = summarise(exp, runs, seeds, quick, wall, jobs)
    out = Path(out_dir) if out_dir is not None else HERE
    folder = out / code
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    write_report(exp, result, folder)
    return result


def write_report(exp: Experiment, result: dict, folder: Path) -> None:
    (folder / "results.md").write_text(render_markdown(exp, result))
    plot(exp, result, folder / "plot.png")


def replot(code: str, out: Path) -> dict:
    """Rewrite results.md and plot.png from an earlier run's results.json."""
    folder = out / code
    result = json.loads((folder / "results.json").read_text())
    write_report(EXPERIMENTS[code], result, folder)
    return result


# --------------------------------------------------------------------------
# summarising


def mean_std(values):
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return values[0], 0.0
    return statistics.fmean(values), statistics.stdev(values)


def summarise(exp: Experiment, runs, seeds, quick, wall, jobs) -> dict:
    by_variant = {v: [r for r in runs if r["variant"] == v] for v in VARIANTS}
    variants = {}
    for v, rs in by_variant.items():
        rs.sort(key=lambda r: r["seed"])
        fa = [r["final_averaged"] for r in rs]
        fo = [r["final_online"] for r in rs]
        variants[v] = {
            "final_averaged": fa,
            "final_online": fo,
            "final_averaged_mean_std": mean_std(fa),
            "final_online_mean_std": mean_std(fo),
            "curves_averaged": [r["averaged"] for r in rs],
            "curves_online": [r["online"] for r in rs],
            "seconds": [r["seconds"] for r in rs],
            "cpu_seconds": [r.get("cpu_seconds", math.nan) for r in rs],
        }
    gaps = [
        f - b
        for f, b in zip(
            variants["fixed"]["final_averaged"], variants["buggy"]["final_averaged"], strict=True
        )
    ]
    return {
        "code": exp.code,
        "name": exp.name,
        "title": exp.title,
        "quick": quick,
        "seeds": list(seeds),
        "variants": variants,
        "gap_per_seed": gaps,
        "gap_mean_std": mean_std(gaps),
        "wall_seconds": wall,
        "jobs": jobs,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def pm(ms) -> str:
    m, s = ms
    return f"{pct(m)} ± {pct(s)} %"


def verdict(result: dict) -> str:
    gaps = result["gap_per_seed"]
    g, s = result["gap_mean_std"]
    n = len(gaps)
    if all(x > 0 for x in gaps) and g > s:
        return (
            f"The fixed script's averaged model is better on every seed ({n} of {n});"
            f" mean gap {100 * g:+.1f} points."
        )
    if g > 0:
        wins = sum(x > 0 for x in gaps)
        return (
            f"The fixed script's averaged model is better on {wins} of {n} seeds; the"
            f" mean gap ({100 * g:+.1f} points) is small against the seed-to-seed spread"
            f" ({100 * s:.1f} points)."
        )
    return (
        f"No gap in this setting: mean difference {100 * g:+.1f} points"
        f" (spread {100 * s:.1f} points)."
    )


def script_diff(code: str) -> str:
    buggy = (HERE / code / "buggy.py").read_text().splitlines(keepends=True)
    fixed = (HERE / code / "fixed.py").read_text().splitlines(keepends=True)
    return "".join(difflib.unified_diff(buggy, fixed, f"{code}/buggy.py", f"{code}/fixed.py", n=2))


def runtime_text(r: dict) -> str:
    b, f = r["variants"]["buggy"], r["variants"]["fixed"]
    n_runs = 2 * len(r["seeds"])
    slowest = max(b["seconds"] + f["seconds"])
    text = (
        f"{n_runs} runs ({len(r['seeds'])} seeds × 2 scripts) took {r['wall_seconds']:.0f} s"
        f" of wall time, {r['jobs']} run(s) at a time, one torch thread per run"
        f" (slowest run {slowest:.0f} s; torch {r['torch']}, CPU)."
    )
    cpu = [c for c in b.get("cpu_seconds", []) + f.get("cpu_seconds", []) if not math.isnan(c)]
    if cpu:
        text += (
            f" The runs used {sum(cpu):.0f} s of CPU time in all ({max(cpu):.0f} s for the"
            " longest run): what the experiment takes on an idle machine with one run at a"
            " time. The machine was shared with other jobs, hence the longer wall time."
        )
    return text


def render_markdown(exp: Experiment, r: dict) -> str:
    b, f = r["variants"]["buggy"], r["variants"]["fixed"]
    seeds = ", ".join(str(s) for s in r["seeds"])
    per_seed = ", ".join(f"{100 * g:+.1f}" for g in r["gap_per_seed"])
    quick = " (quick mode: fewer epochs and seeds)" if r["quick"] else ""
    lines = [
        f"# {exp.code} `{exp.name}`: {exp.title}",
        "",
        "Generated by `python docs/evidence/run_all.py"
        f"{' --quick' if r['quick'] else ''} --only {exp.code}`{quick}; do not edit by hand.",
        "",
        "## The bug",
        "",
        exp.bug,
        "",
        "## Result",
        "",
        "Validation accuracy after the last epoch, mean ± standard deviation over"
        f" {len(r['seeds'])} seeds ({seeds}).",
        "",
        "| script | averaged model | online model (reference) |",
        "| --- | --- | --- |",
        f"| `buggy.py` | {pm(b['final_averaged_mean_std'])} | {pm(b['final_online_mean_std'])} |",
        f"| `fixed.py` | {pm(f['final_averaged_mean_std'])} | {pm(f['final_online_mean_std'])} |",
        "",
        f"Gap, fixed − buggy averaged model: {100 * r['gap_mean_std'][0]:+.1f} points"
        f" (per seed: {per_seed}). {verdict(r)}",
        "",
        "![validation accuracy per epoch](plot.png)",
        "",
        "## The fix",
        "",
        exp.fix,
        "",
        "```diff",
        script_diff(exp.code).rstrip("\n"),
        "```",
        "",
        "## Setup",
        "",
        exp.setup,
    ]
    if exp.notes:
        lines += ["", exp.notes]
    lines += [
        "",
        "## Runtime",
        "",
        runtime_text(r),
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# plotting


def plot(exp: Experiment, r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)

    def band(curves, label, color, style="-", online=False):
        arr = 100 * np.array(curves, dtype=float)
        epochs = np.arange(1, arr.shape[1] + 1)
        keep = ~np.isnan(arr).all(axis=0)  # SWA curves start when averaging does
        arr, epochs = arr[:, keep], epochs[keep]
        mean = arr.mean(axis=0)
        std = arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros_like(mean)
        # Online curves are drawn thinner and on top: where an averaged curve
        # coincides with the online one (EMA302), both stay visible.
        z, lw, alpha = (3, 1.4, 0.12) if online else (2, 2.2, 0.2)
        ax.plot(epochs, mean, style, color=color, label=label, lw=lw, marker="o", ms=3, zorder=z)
        ax.fill_between(epochs, mean - std, mean + std, color=color, alpha=alpha, lw=0, zorder=z)

    b, f = r["variants"]["buggy"], r["variants"]["fixed"]
    band(b["curves_averaged"], "averaged model, buggy.py", "#d62728")
    band(f["curves_averaged"], "averaged model, fixed.py", "#2ca02c")
    if exp.online_differs:
        band(b["curves_online"], "online model, buggy.py", "#8c1c13", ":", online=True)
        band(f["curves_online"], "online model, fixed.py", "#1b5e20", ":", online=True)
    else:
        band(f["curves_online"], "online model", "0.3", "--", online=True)

    n = len(r["seeds"])
    ax.set_title(f"{exp.code} {exp.name}\n{exp.title}", fontsize=11)
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9, title=f"mean ± std over {n} seeds")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------
# README summary


def runtime_cell(r: dict) -> str:
    cpu = [
        c for v in VARIANTS for c in r["variants"][v].get("cpu_seconds", []) if not math.isnan(c)
    ]
    wall = f"{r['wall_seconds']:.0f} s"
    return f"{wall} ({sum(cpu):.0f} s CPU)" if cpu else wall


def update_readme(out: Path) -> None:
    readme = out / "README.md"
    if not readme.exists():
        return
    rows = [
        "| rule | bug | averaged, buggy | averaged, fixed | online (fixed run) | gap | wall time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for code, exp in EXPERIMENTS.items():
        path = out / code / "results.json"
        if not path.exists():
            rows.append(f"| [{code}]({code}/results.md) | {exp.title} | — | — | — | — | — |")
            continue
        r = json.loads(path.read_text())
        b, f = r["variants"]["buggy"], r["variants"]["fixed"]
        rows.append(
            f"| [{code}]({code}/results.md) `{exp.name}` | {exp.title}"
            f" | {pm(b['final_averaged_mean_std'])} | {pm(f['final_averaged_mean_std'])}"
            f" | {pm(f['final_online_mean_std'])}"
            f" | {100 * r['gap_mean_std'][0]:+.1f} | {runtime_cell(r)} |"
        )
    text = readme.read_text()
    head, sep, rest = text.partition(README_START)
    _, sep2, tail = rest.partition(README_END)
    if not sep or not sep2:
        return
    readme.write_text(head + README_START + "\n" + "\n".join(rows) + "\n" + README_END + tail)


# --------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        metavar="CODE",
        help="run only this experiment (repeatable, or comma-separated)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="reduced run (fewer epochs and seeds); writes to a temporary folder"
        " unless --out is given",
    )
    parser.add_argument("--out", type=Path, help="output folder (default: docs/evidence)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 3, quick 2)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        help="runs in parallel (default: 2, or 1 on a single-core machine)",
    )
    parser.add_argument("--verbose", action="store_true", help="show the scripts' output")
    parser.add_argument(
        "--replot",
        action="store_true",
        help="only rewrite results.md and plot.png from the saved results.json",
    )
    args = parser.parse_args(argv)

    codes = list(EXPERIMENTS)
    if args.only:
        wanted = [c.strip().upper() for item in args.only for c in item.split(",")]
        unknown = [c for c in wanted if c not in EXPERIMENTS]
        if unknown:
            parser.error(f"unknown experiment(s): {', '.join(unknown)}")
        codes = [c for c in codes if c in wanted]

    out = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="ema-evidence-quick-")) if args.quick else HERE
    seeds = range(args.seeds) if args.seeds else None

    failed = False
    for code in codes:
        if args.replot:
            r = replot(code, out)
        else:
            r = run_experiment(code, args.quick, out, seeds, args.jobs, args.verbose)
        b = r["variants"]["buggy"]["final_averaged_mean_std"]
        f = r["variants"]["fixed"]["final_averaged_mean_std"]
        o = r["variants"]["fixed"]["final_online_mean_std"]
        ok = all(math.isfinite(x) for x in (*b, *f, *o))
        failed |= not ok
        print(
            f"{code:7s} buggy {pm(b):>16s}  fixed {pm(f):>16s}  online {pm(o):>16s}"
            f"  gap {100 * r['gap_mean_std'][0]:+5.1f}  {r['wall_seconds']:5.1f} s"
            f"{'' if ok else '  NON-FINITE'}",
            flush=True,
        )
    if out.resolve() == HERE and not r["quick"]:
        update_readme(out)
    print(f"outputs in {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
