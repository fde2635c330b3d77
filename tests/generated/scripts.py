"""Realistic training scripts, written from parts by a hypothesis strategy.

A script is planned first (:class:`Plan`: which averaging API and how it is imported, where
its decay is written, how long the run is, what the loop looks like, which legitimate
look-alikes surround it, all names drawn at random), then bugs are injected into the plan
by the injectors of ``tests/generated/injectors.py``, then the plan is rendered to source.
Rendering records the line of every *tagged* piece of code, so each injected bug knows the
line its finding must be reported on.

The parts:

- imports: torch under its name or an alias, ``torch.nn`` three ways, the averaging API
  imported by name, under an alias, or through its module;
- the averaging object (:data:`FLAVORS`): timm ``ModelEmaV2``/``ModelEmaV3``, torch
  ``AveragedModel`` with an EMA function, diffusers ``EMAModel``, ema-pytorch ``EMA``,
  torch-ema, mmengine's momentum-style ``ExponentialMovingAverage``, ultralytics
  ``ModelEMA``; each knows how it is built, updated and evaluated;
- where the decay is written: at the call (by keyword or position), in a module constant,
  an argparse default, a dataclass field, or a function default;
- the run: unknown (a loop over a data loader), known and long (``range`` and ``islice``
  loops over module constants, or a ``MAX_STEPS`` constant), or known and short;
- the loop: plain, with gradient accumulation (``if (step + 1) % ACCUM == 0``), with
  Hugging Face accelerate (``accumulate()`` and ``sync_gradients``), or with AMP;
- validation in the training function or in a function of its own;
- legitimate code a naive linter would flag: BatchNorm momentum, Adam betas, SGD
  momentum, an ExponentialLR gamma, a smoothed loss, ``optax.ema`` of gradients, a
  hand-made DINO-style teacher, an export cast after training.
"""

from __future__ import annotations

import builtins
import keyword
import re
from dataclasses import dataclass, field

from hypothesis import strategies as st

from ema_lint.analysis.objects.apis import Side


# The averaging APIs ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Flavor:
    """One averaging API: how a script imports, builds, updates and evaluates it."""

    key: str
    module: str
    name: str
    side: Side  # OLD: the argument is the decay; NEW: it is the momentum 1 - decay
    param: str
    # ``{cls}``, ``{model}``, ``{value}`` (the weight argument, keyword or positional).
    build: str
    update: str  # ``{ema}``, ``{model}``
    inner: str  # the averaged model as an expression: ``{ema}.module``
    evaluate: str = "inner"  # "inner", "swap" (store/copy_to/restore) or "context"
    positional: bool = True  # the weight may be passed by position
    ramped: bool = False  # a warmup ramps the decay (EMA104 follows it)
    cast: str = "{inner}.half()"  # a cast of the averaged copy to half precision
    extra: str = ""  # more arguments, e.g. ", update_every=1"


FLAVORS = (
    Flavor(
        "timm-v2",
        "timm.utils",
        "ModelEmaV2",
        Side.OLD,
        "decay",
        "{cls}({model}, {value})",
        "{ema}.update({model})",
        "{ema}.module",
    ),
    Flavor(
        "timm-v3",
        "timm.utils",
        "ModelEmaV3",
        Side.OLD,
        "decay",
        "{cls}({model}, {value})",
        "{ema}.update({model})",
        "{ema}.module",
        cast="{inner}.to(device, dtype={torch}.float16)",
    ),
    Flavor(
        "torch-averaged",
        "torch.optim.swa_utils",
        "AveragedModel",
        Side.OLD,
        "decay",
        "{cls}({model}, multi_avg_fn={fn}({value}))",
        "{ema}.update_parameters({model})",
        "{ema}.module",
    ),
    Flavor(
        "diffusers",
        "diffusers.training_utils",
        "EMAModel",
        Side.OLD,
        "decay",
        "{cls}({model}.parameters(), {value})",
        "{ema}.step({model}.parameters())",
        "{model}",
        evaluate="swap",
        ramped=True,
        cast="{ema}.to(device, dtype={torch}.float16)",
    ),
    Flavor(
        "ema-pytorch",
        "ema_pytorch",
        "EMA",
        Side.OLD,
        "beta",
        "{cls}({model}, {value}{extra})",
        "{ema}.update()",
        "{ema}.ema_model",
        positional=False,
        ramped=True,
        extra=", update_every=1",
    ),
    Flavor(
        "torch-ema",
        "torch_ema",
        "ExponentialMovingAverage",
        Side.OLD,
        "decay",
        "{cls}({model}.parameters(), {value})",
        "{ema}.update()",
        "{model}",
        evaluate="context",
        ramped=True,
        cast="{ema}.to(device, dtype={torch}.float16)",
    ),
    Flavor(
        "mmengine",
        "mmengine.model",
        "ExponentialMovingAverage",
        Side.NEW,
        "momentum",
        "{cls}({model}, {value})",
        "{ema}.update_parameters({model})",
        "{ema}.module",
    ),
    Flavor(
        "ultralytics",
        "ultralytics.utils.torch_utils",
        "ModelEMA",
        Side.OLD,
        "decay",
        "{cls}({model}, {value})",
        "{ema}.update({model})",
        "{ema}.ema",
        ramped=True,
    ),
)


# Values ----------------------------------------------------------------------------------------
def written(decay: float, side: Side, interval: int = 1) -> str:
    """How a script writes a per-step ``decay`` for this side (decay ``0.9998`` or momentum
    ``0.0002``) when the object is updated every ``interval`` steps: ``decay ** interval``.
    """
    value = round(decay**interval, 6)
    if side is Side.NEW:
        value = round(1.0 - value, 6)
    return repr(value)


@dataclass
class Bug:
    """An injected bug: its rule, where its finding goes, and what ``--fix`` does to it."""

    code: str
    injector: str
    tag: str  # the rendered line carrying this tag is where the finding is reported
    fix: str | None  # "safe", "unsafe" or None


@dataclass
class Teacher:
    name: str
    api: str  # "timm" or "torch"
    value: str  # decay as written


@dataclass
class Plan:
    """Everything a script will contain; injectors edit it before it is rendered."""

    flavor: Flavor
    import_style: str  # "from", "alias", "module"
    names: dict[str, str]
    value: str  # the weight argument as written (in the flavor's semantics)
    placement: str  # "inline", "keyword", "constant", "argparse", "dataclass", "default"
    run: str  # "unknown", "loops", "named", "short"
    loop: str  # "plain", "accumulate", "accelerate", "amp"
    structure: str  # "functions" (a train function) or "class" (a Trainer's methods)
    epochs: int
    steps: int
    accumulation: int
    validation: str  # "inline" or "function"
    multiline: bool
    extras: frozenset[str]
    teacher: Teacher | None = None
    cast: str = "none"  # "none", "bug" (before the loop), "export" (after training)
    wrapped_copy: bool = False  # the averaged copy is made after accelerate.prepare
    # Where the update sits: "after-step" (next to the step, under its guard), "sync-inside"
    # (accelerate: ``if sync_gradients:`` inside ``accumulate()``), "outside-guard" (on every
    # micro-batch: EMA202), "before-step" (before the step of its iteration: EMA203).
    order: str = "after-step"
    # The averaged copy's mode at evaluation: "eval" (``.eval()`` before it), "built-eval"
    # (no call: timm and ultralytics make their copy in eval mode), "missing" (EMA204).
    mode: str = "eval"
    # How the swap flavors evaluate: "flavor" (the flavor's own way), "swap" (torch-ema's
    # store/copy_to/restore), "try" (the restore in ``finally``), "missing" (EMA205).
    swap: str = "flavor"
    # Where the average lives: "same" (the model's device), "documented" (an offload the
    # API documents), "cpu" (a ``.cpu()`` or ``device="cpu"`` on the copy: EMA201).
    device: str = "same"
    bugs: list[Bug] = field(default_factory=list)

    @property
    def uses_argparse(self) -> bool:
        return self.placement == "argparse" or self.run == "unknown"

    @property
    def interval(self) -> int:
        """Optimizer steps per update of the averaging object: always 1 here, because every
        loop variant updates it next to ``optimizer.step()``, under the same accumulation
        guard if there is one (EMA101 judges the decay per optimizer step)."""
        return 1

    def ref(self, key: str) -> str:
        """How the training code refers to an object: ``self.<name>`` in a class."""
        name = self.names.get(key, key)
        return f"self.{name}" if self.structure == "class" and key in _ATTRIBUTES else name


_ATTRIBUTES = frozenset(
    (
        "model",
        "ema",
        "optimizer",
        "loader",
        "val_loader",
        "criterion",
        "teacher",
        "scaler",
        "accelerator",
        "scheduler",
        "dino_teacher",
        "args",
    )
)

# Names -----------------------------------------------------------------------------------------
NAME_POOLS = {
    "model": ("model", "net", "network", "backbone", "classifier", "unet"),
    "ema": ("ema", "model_ema", "ema_model", "averaged", "avg_model", "ema_net", "shadow"),
    "optimizer": ("optimizer", "opt", "optim", "optimiser", "sgd", "adamw", "solver"),
    "loader": ("loader", "train_loader", "dataloader", "train_dl"),
    "val_loader": ("val_loader", "eval_loader", "valid_dl"),
    "criterion": ("criterion", "loss_fn", "loss_func"),
    "train": ("train", "fit", "run_training", "train_model", "main_loop"),
    "evaluate": ("evaluate", "validate", "run_eval", "eval_model"),
    "step": ("step", "i", "it", "batch_idx"),
    "epoch": ("epoch", "ep", "e"),
    "torch": ("torch", "torch", "torch", "th"),
    "nn": ("nn", "nn", "tnn"),
    "alias": ("EMA", "Ema", "Averager", "WeightEMA", "EmaWrapper"),
    "module_alias": ("ema_utils", "averaging", "emalib"),
    "constant": ("EMA_DECAY", "DECAY", "MODEL_EMA_DECAY", "EMA_RATE"),
    "momentum_constant": ("EMA_MOMENTUM", "MOMENTUM", "EMA_M"),
    "flag": ("--ema-decay", "--model-ema-decay", "--ema-rate"),
    "momentum_flag": ("--ema-momentum", "--momentum"),
    "teacher": ("teacher", "teacher_model", "momentum_encoder", "mean_teacher"),
    "trainer": ("Trainer", "EmaTrainer", "ClassifierTrainer"),
}
# Names that carry no role: they may also be any identifier at all (the optimizer too: the
# analysis knows it by where it was made, not by its name).
_NEUTRAL = ("optimizer", "loader", "val_loader", "criterion", "train", "evaluate", "step", "epoch")
# Words that give a variable a role in the averaging model (a teacher, a target network, an
# averaged copy) or clash with the script's own names; random names avoid them.
_LOADED = re.compile(
    r"ema|avg|swa|shadow|teacher|target|momentum|polyak|tau|mean|average|encoder|online|"
    r"^(x|y|e|out|loss|args|cfg|parser|self|device|scaler|scheduler|accelerator|exported|"
    r"correct|total|accuracy|target|running_loss|dino_teacher|main|build_model|"
    r"gradient_smoother|parse_args|make_loader|islice|copy|argparse|dataclass|optax|nn|tnn|"
    r"torch|th|F|config|Config|LR|p_s|p_t)$"
)
_IDENTIFIERS = st.from_regex(r"[a-z][a-z0-9_]{1,9}", fullmatch=True).filter(
    lambda name: (
        not keyword.iskeyword(name)
        and not keyword.issoftkeyword(name)
        and name not in dir(builtins)
        and not _LOADED.search(name)
    )
)
EXTRAS = (
    "batchnorm",  # nn.BatchNorm1d(..., momentum=0.01)
    "adam-betas",  # AdamW(betas=(0.9, 0.999))
    "sgd",  # SGD(momentum=0.9) instead of AdamW
    "lr-gamma",  # ExponentialLR(gamma=0.99)
    "smoothed-loss",  # running = 0.98 * running + 0.02 * loss
    "optax",  # optax.ema(decay=0.9) of gradients, in a helper
    "dino-teacher",  # hand-made teacher: p_t.mul_(0.996).add_(...)
)


def _names(draw) -> dict[str, str]:
    names: dict[str, str] = {}
    for key, pool in NAME_POOLS.items():
        taken = frozenset(names.values()) - {"torch"}
        if key in _NEUTRAL and draw(st.integers(0, 3)) == 0:
            choice = draw(_IDENTIFIERS.filter(lambda name, taken=taken: name not in taken))
        else:
            choice = draw(st.sampled_from([n for n in pool if n not in taken] or list(pool)))
        names[key] = choice
    return names


@st.composite
def plans(draw) -> Plan:
    """A clean plan: every value in range, every look-alike legitimate."""
    flavor = draw(st.sampled_from(FLAVORS))
    placements = ["inline", "keyword", "constant", "argparse", "dataclass", "default"]
    if not flavor.positional:
        placements.remove("inline")
    plan = Plan(
        flavor=flavor,
        import_style=draw(st.sampled_from(["from", "alias", "module"])),
        names=_names(draw),
        value="",
        placement=draw(st.sampled_from(placements)),
        run=draw(st.sampled_from(["unknown", "loops", "named"])),
        loop=draw(st.sampled_from(["plain", "accumulate", "accelerate", "amp"])),
        structure=draw(st.sampled_from(["functions", "class"])),
        epochs=draw(st.sampled_from([100, 200, 300])),
        steps=draw(st.sampled_from([2000, 5000])),
        accumulation=draw(st.sampled_from([2, 4, 8])),
        validation=draw(st.sampled_from(["inline", "function"])),
        multiline=draw(st.booleans()),
        extras=frozenset(draw(st.sets(st.sampled_from(EXTRAS)))),
    )
    # Well inside 0.999-0.9999.
    step_decay = draw(st.sampled_from([0.9992, 0.9995, 0.9998]))
    plan.value = written(step_decay, flavor.side, plan.interval)
    return plan


# Rendering -------------------------------------------------------------------------------------
class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.tags: dict[str, int] = {}
        self.depth = 0

    def __call__(self, text: str = "", tag: str | None = None) -> None:
        for part in text.split("\n"):
            self.lines.append(("    " * self.depth + part) if part else "")
            if tag is not None and tag not in self.tags:
                self.tags[tag] = len(self.lines)

    def block(self) -> _Indent:
        return _Indent(self)


class _Indent:
    def __init__(self, writer: _Writer) -> None:
        self.writer = writer

    def __enter__(self) -> None:
        self.writer.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.writer.depth -= 1


@dataclass
class Script:
    source: str
    plan: Plan
    lines: dict[str, int]  # tag -> 1-based line

    def expected(self) -> list[tuple[str, int]]:
        return sorted((bug.code, self._line(bug.tag)) for bug in self.plan.bugs)

    def _line(self, tag: str) -> int:
        # A bad value is reported where its literal is written (the constant, the argparse
        # default, the field, the parameter's default), the call using it being related.
        if tag == "value":
            return self.lines.get("value-definition", self.lines[tag])
        return self.lines[tag]


def render(plan: Plan) -> Script:
    w = _Writer()
    cls, fn = _header(w, plan)
    value = _settings(w, plan)
    _helpers(w, plan)
    w()
    w()
    if plan.structure == "class":
        value = _trainer_class(w, plan, cls, fn, value)
    else:
        value = _train_function(w, plan, cls, fn, value)
    _main(w, plan)
    return Script("\n".join(w.lines) + "\n", plan, w.tags)


def _header(w: _Writer, plan: Plan) -> tuple[str, str]:
    n = plan.names
    w('"""Train a classifier with an exponential moving average of its weights."""')
    w()
    if plan.uses_argparse:
        w("import argparse")
    if plan.teacher is not None or "dino-teacher" in plan.extras or plan.cast == "export":
        w("import copy")
    if plan.placement == "dataclass":
        w("from dataclasses import dataclass")
    if plan.run in ("loops", "short"):
        w("from itertools import islice")
    w()
    if "optax" in plan.extras:
        w("import optax")
    w("import torch" if n["torch"] == "torch" else f"import torch as {n['torch']}")
    w("import torch.nn as tnn" if n["nn"] == "tnn" else "from torch import nn")
    if plan.teacher is not None:
        w("import torch.nn.functional as F")
    if plan.loop == "accelerate":
        w("from accelerate import Accelerator")
    cls, fn = _import_api(w, plan)
    if plan.teacher is not None:
        if plan.teacher.api == "timm":
            w("from timm.utils import ModelEmaV2 as TeacherEma")
        else:
            w("from torch.optim.swa_utils import AveragedModel as TeacherAvg")
            w("from torch.optim.swa_utils import get_ema_multi_avg_fn as teacher_ema_fn")
    w()
    return cls, fn


def _settings(w: _Writer, plan: Plan) -> str:
    """Module constants, the config dataclass and argparse; returns the value's spelling."""
    f, n = plan.flavor, plan.names
    if plan.run in ("loops", "short"):
        w(f"EPOCHS = {plan.epochs}")
        w(f"STEPS_PER_EPOCH = {plan.steps}")
    if plan.run == "named":
        w(f"MAX_STEPS = {plan.epochs * plan.steps // plan.accumulation}")
    if plan.loop in ("accumulate", "accelerate"):
        w(f"ACCUM = {plan.accumulation}")
    w("LR = 3e-4")
    value = plan.value
    if plan.placement == "constant":
        constant = n["momentum_constant" if f.side is Side.NEW else "constant"]
        w(f"{constant} = {plan.value}", tag="value-definition")
        value = constant
    if "dino-teacher" in plan.extras:
        w("TEACHER_MOMENTUM = 0.996")
    w()
    if plan.placement == "dataclass":
        w()
        w("@dataclass")
        w("class Config:")
        with w.block():
            w("lr: float = 3e-4")
            w(f"ema_{f.param}: float = {plan.value}", tag="value-definition")
            w("batch_size: int = 256")
        value = f"cfg.ema_{f.param}"
        w()
    if plan.uses_argparse:
        w()
        w("def parse_args():")
        with w.block():
            w('parser = argparse.ArgumentParser(description="train")')
            if plan.run == "unknown":
                w('parser.add_argument("--epochs", type=int, default=90)')
            w('parser.add_argument("--lr", type=float, default=3e-4)')
            if plan.placement == "argparse":
                flag = n["momentum_flag" if f.side is Side.NEW else "flag"]
                dest = flag.lstrip("-").replace("-", "_")
                w(
                    f'parser.add_argument("{flag}", type=float, default={plan.value})',
                    tag="value-definition",
                )
                value = f"args.{dest}"
            w("return parser.parse_args()")
        w()
    return value


def _helpers(w: _Writer, plan: Plan) -> None:
    nn = plan.names["nn"]
    w()
    w("def build_model(in_features=32, hidden=128, classes=10):")
    with w.block():
        norm = (
            f"{nn}.BatchNorm1d(hidden, momentum=0.01)"
            if "batchnorm" in plan.extras
            else f"{nn}.LayerNorm(hidden)"
        )
        w(f"return {nn}.Sequential(")
        with w.block():
            w(f"{nn}.Linear(in_features, hidden),")
            w(f"{norm},")
            w(f"{nn}.ReLU(),")
            w(f"{nn}.Linear(hidden, classes),")
        w(")")
    if "optax" in plan.extras:
        w()
        w()
        w("def gradient_smoother(learning_rate=1e-3):")
        with w.block():
            w('"""An EMA of the gradients (not of the weights), for the JAX port."""')
            w("return optax.chain(optax.ema(decay=0.9), optax.sgd(learning_rate))")
    if plan.validation == "function":
        w()
        w()
        _evaluate_function(w, plan)


def _parameters(plan: Plan) -> list[str]:
    n, f = plan.names, plan.flavor
    params = [n["model"], n["loader"], n["val_loader"]]
    if plan.uses_argparse:
        params.append("args")
    if plan.placement == "dataclass":
        params.append("cfg: Config")
    if plan.placement == "default":
        params.append(f"ema_{f.param}={plan.value}")
    return params


def _train_function(w: _Writer, plan: Plan, cls: str, fn: str, value: str) -> str:
    n, f = plan.names, plan.flavor
    params = _parameters(plan)
    if plan.run == "unknown":
        params.append("num_epochs=None")
    if plan.placement == "default":
        value = f"ema_{f.param}"
    tag = "value-definition" if plan.placement == "default" else None
    w(f"def {n['train']}({', '.join(params)}):", tag=tag)
    with w.block():
        if plan.run == "unknown":
            w("num_epochs = num_epochs or args.epochs")
        _setup(w, plan, cls, fn, value)
        _loops(w, plan)
        _export(w, plan)
        w(f"return {plan.ref('ema')}")
    return value


def _trainer_class(w: _Writer, plan: Plan, cls: str, fn: str, value: str) -> str:
    n, f = plan.names, plan.flavor
    params = ["self", *_parameters(plan)]
    if plan.placement == "default":
        value = f"ema_{f.param}"
    w(f"class {n['trainer']}:")
    with w.block():
        tag = "value-definition" if plan.placement == "default" else None
        w(f"def __init__({', '.join(params)}):", tag=tag)
        with w.block():
            for key in ("model", "loader", "val_loader"):
                w(f"{plan.ref(key)} = {n[key]}")
            if plan.uses_argparse:
                w("self.args = args")
            _setup(w, plan, cls, fn, value)
        w()
        w(f"def {n['train']}(self, num_epochs=None):")
        with w.block():
            if plan.run == "unknown":
                w("num_epochs = num_epochs or self.args.epochs")
            _loops(w, plan)
            _export(w, plan)
            w(f"return {plan.ref('ema')}")
    return value


def _setup(w: _Writer, plan: Plan, cls: str, fn: str, value: str) -> None:
    """Optimizer, loss, the averaging object and its companions."""
    n, r = plan.names, plan.ref
    torch, nn = n["torch"], n["nn"]
    model, opt = r("model"), r("optimizer")
    if "sgd" in plan.extras:
        w(f"{opt} = {torch}.optim.SGD({model}.parameters(), lr=LR, momentum=0.9)")
    elif "adam-betas" in plan.extras:
        w(
            f"{opt} = {torch}.optim.AdamW({model}.parameters(), lr=LR, "
            "betas=(0.9, 0.999), weight_decay=0.05)"
        )
    else:
        w(f"{opt} = {torch}.optim.AdamW({model}.parameters(), lr=LR)")
    if "lr-gamma" in plan.extras:
        w(f"{r('scheduler')} = {torch}.optim.lr_scheduler.ExponentialLR({opt}, gamma=0.99)")
    w(f"{r('criterion')} = {nn}.CrossEntropyLoss(label_smoothing=0.1)")
    w(f'device = "cuda" if {torch}.cuda.is_available() else "cpu"')
    w(f"{model}.to(device)")
    if plan.loop == "amp":
        w(f"{r('scaler')} = {torch}.cuda.amp.GradScaler()")
    # The averaged copies are made of the bare model, before accelerate wraps it (timm's
    # recipe); the EMA207 injector moves the main one after the wrapping.
    if not plan.wrapped_copy:
        _averaged_copy(w, plan, cls, fn, value)
    teacher = plan.teacher
    if teacher is not None:
        name = r("teacher")
        if teacher.api == "timm":
            w(f"{name} = TeacherEma({model}, decay={teacher.value})", tag="teacher")
        else:
            w(
                f"{name} = TeacherAvg({model}, multi_avg_fn=teacher_ema_fn({teacher.value}))",
                tag="teacher",
            )
    if "dino-teacher" in plan.extras:
        w(f"{r('dino_teacher')} = copy.deepcopy({model})")
        w(f"{r('dino_teacher')}.requires_grad_(False)")
    if plan.loop == "accelerate":
        accelerator, loader = r("accelerator"), r("loader")
        w(f"{accelerator} = Accelerator(gradient_accumulation_steps=ACCUM)")
        w(f"{model}, {opt}, {loader} = {accelerator}.prepare({model}, {opt}, {loader})")
    if plan.wrapped_copy:
        _averaged_copy(w, plan, cls, fn, value)


def _averaged_copy(w: _Writer, plan: Plan, cls: str, fn: str, value: str) -> None:
    f, r = plan.flavor, plan.ref
    _build_ema(w, plan, cls, fn, value)
    ema = r("ema")
    if plan.cast == "bug":
        inner = f.inner.format(ema=r("ema"), model=r("model"))
        w(f.cast.format(inner=inner, ema=r("ema"), torch=plan.names["torch"]), tag="cast")
    # After the cast, which may move the copy to ``device`` too.
    if plan.device == "cpu" and f.key != "torch-averaged":
        moved = f'{ema}.to("cpu")' if f.key in ("diffusers", "torch-ema") else f"{ema}.cpu()"
        if f.key == "ultralytics":
            moved = f"{ema}.ema.cpu()"
        w(moved, tag="device")
    elif plan.device == "documented" and f.key == "diffusers":
        w(f'{ema}.to("cpu")')
        w(f"{ema}.pin_memory()")
    elif plan.device == "documented" and f.key == "ema-pytorch":
        w(f'{ema}.to("cpu")')


def _export(w: _Writer, plan: Plan) -> None:
    if plan.device == "saved":
        inner = plan.flavor.inner.format(ema=plan.ref("ema"), model=plan.ref("model"))
        w(f'{plan.names["torch"]}.save({inner}.cpu().state_dict(), "ema.pt")')
    if plan.cast != "export":
        return
    inner = plan.flavor.inner.format(ema=plan.ref("ema"), model=plan.ref("model"))
    w("# Export the averaged weights in half precision once training is done.")
    w(f"exported = copy.deepcopy({inner}).half()", tag="export")
    w(f'{plan.names["torch"]}.save(exported.state_dict(), "ema_fp16.pt")')


def write_main(
    w: _Writer, names: dict[str, str], setup: list[tuple[str, str]], trainer_class: bool
) -> None:
    """``main()`` of every generated script: ``setup`` statements (each binds a name passed
    on to training: ``args = parse_args()``), the model and loaders, then the training
    function or a trainer class; and the ``__main__`` guard."""
    n = names
    w()
    w()
    w("def main():")
    with w.block():
        for statement, _ in setup:
            w(statement)
        w(f"{n['model']} = build_model()")
        w(f"{n['loader']} = make_loader(train=True)")
        w(f"{n['val_loader']} = make_loader(train=False)")
        call = ", ".join([n["model"], n["loader"], n["val_loader"], *(a for _, a in setup)])
        if trainer_class:
            w(f"trainer = {n['trainer']}({call})")
            w(f"trainer.{n['train']}()")
        else:
            w(f"{n['train']}({call})")
    w()
    w()
    w('if __name__ == "__main__":')
    with w.block():
        w("main()")


def _main(w: _Writer, plan: Plan) -> None:
    setup = [("args = parse_args()", "args")] if plan.uses_argparse else []
    if plan.placement == "dataclass":
        setup.append(("cfg = Config()", "cfg"))
    write_main(w, plan.names, setup, plan.structure == "class")


def _import_api(w: _Writer, plan: Plan) -> tuple[str, str]:
    """Import the flavor's API; returns how the class (and EMA function) are named."""
    f, style = plan.flavor, plan.import_style
    fn_name = "get_ema_multi_avg_fn"
    if style == "from":
        extra = f", {fn_name}" if f.key == "torch-averaged" else ""
        w(f"from {f.module} import {f.name}{extra}")
        return f.name, fn_name
    if style == "alias":
        alias = plan.names["alias"]
        w(f"from {f.module} import {f.name} as {alias}")
        if f.key == "torch-averaged":
            w(f"from {f.module} import {fn_name} as ema_fn")
            return alias, "ema_fn"
        return alias, fn_name
    module_alias = plan.names["module_alias"]
    w(f"import {f.module} as {module_alias}")
    return f"{module_alias}.{f.name}", f"{module_alias}.{fn_name}"


# APIs whose documentation offers a CPU copy as a memory trade-off (``device="cpu"``).
_DEVICE_ARGUMENT = ("timm-v2", "timm-v3")


def _build_ema(w: _Writer, plan: Plan, cls: str, fn: str, value: str) -> None:
    f, r = plan.flavor, plan.ref
    model, ema = r("model"), r("ema")
    argument = value if plan.placement == "inline" else f"{f.param}={value}"
    extra = f.extra
    if plan.device == "documented" and f.key == "ema-pytorch":
        extra += ", allow_different_devices=True"
    built = f.build.format(cls=cls, fn=fn, model=model, value="{value}", extra=extra)
    # A CPU copy is a bug for AveragedModel, a documented memory trade-off for timm.
    if (plan.device == "cpu" and f.key == "torch-averaged") or (
        plan.device == "documented" and f.key in _DEVICE_ARGUMENT
    ):
        built = built[:-1] + ', device="cpu")'
    if not plan.multiline:
        w(f"{ema} = " + built.format(value=argument), tag="value")
        w.tags.setdefault("model-argument", len(w.lines))
        if 'device="cpu"' in built:
            w.tags.setdefault("device", len(w.lines))
        return
    # One argument per line, black style.
    head, _, rest = built.partition("(")
    w(f"{ema} = {head}(")
    with w.block():
        for number, arg in enumerate(_split_arguments(rest[:-1])):
            if "{value}" in arg:
                w(arg.format(value=argument) + ",", tag="value")
            elif arg.startswith("device="):
                w(arg + ",", tag="device")
            else:
                w(arg + ",", tag="model-argument" if number == 0 else None)
    w(")")


def _split_arguments(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        depth += char in "([{"
        depth -= char in ")]}"
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _evaluate_function(w: _Writer, plan: Plan) -> None:
    n, torch = plan.names, plan.names["torch"]
    w(f"def {n['evaluate']}(model, loader):")
    with w.block():
        if plan.mode == "eval":
            w("model.eval()")
        w("correct = total = 0")
        w(f"with {torch}.no_grad():")
        with w.block():
            w("for x, y in loader:")
            with w.block():
                w("correct += (model(x).argmax(dim=1) == y).sum().item()")
                w("total += y.numel()")
        if plan.mode == "eval":
            w("model.train()")
        w("return correct / max(total, 1)")


def _validate(w: _Writer, plan: Plan) -> None:
    f, n, r = plan.flavor, plan.names, plan.ref
    model, ema, val = r("model"), r("ema"), r("val_loader")
    inner = f.inner.format(ema=ema, model=model)
    function = plan.validation == "function"
    check = f"accuracy = {n['evaluate']}({inner}, {val})" if function else None
    if f.evaluate == "swap" or plan.swap != "flavor":
        w(f"{ema}.store({model}.parameters())", tag="store")
        w(f"{ema}.copy_to({model}.parameters())", tag="copy-to")
        if plan.swap == "try":
            w("try:")
            with w.block():
                _one_validation(w, plan, check, inner)
            w("finally:")
            with w.block():
                w(f"{ema}.restore({model}.parameters())")
        else:
            _one_validation(w, plan, check, inner)
            if plan.swap != "missing":
                w(f"{ema}.restore({model}.parameters())")
    elif f.evaluate == "context":
        w(f"with {ema}.average_parameters():")
        with w.block():
            _one_validation(w, plan, check, inner)
    else:
        _one_validation(w, plan, check, inner)
    w('print(f"epoch {' + n["epoch"] + '}: accuracy {accuracy:.3f}")')


def _one_validation(w: _Writer, plan: Plan, check: str | None, inner: str) -> None:
    if check is not None:
        w(check, tag="evaluation")
        return
    torch, val = plan.names["torch"], plan.ref("val_loader")
    if plan.mode == "eval":
        w(f"{inner}.eval()")
    w("correct = total = 0")
    w(f"with {torch}.no_grad():")
    with w.block():
        w(f"for x, y in {val}:")
        with w.block():
            w(f"correct += ({inner}(x).argmax(dim=1) == y).sum().item()", tag="evaluation")
            w("total += y.numel()")
    w("accuracy = correct / max(total, 1)")


def _loops(w: _Writer, plan: Plan) -> None:
    f, n, r = plan.flavor, plan.names, plan.ref
    model, ema, opt, loader, crit = (
        r("model"),
        r("ema"),
        r("optimizer"),
        r("loader"),
        r("criterion"),
    )
    step, epoch = n["step"], n["epoch"]
    update = f.update.format(ema=ema, model=model)
    epochs = {"unknown": "num_epochs", "loops": "EPOCHS", "short": "EPOCHS", "named": "90"}[
        plan.run
    ]
    if plan.run in ("loops", "short"):
        batches = f"enumerate(islice({loader}, STEPS_PER_EPOCH))"
    else:
        batches = f"enumerate({loader})"
    if "smoothed-loss" in plan.extras:
        w("running_loss = 0.0")
    w(f"for {epoch} in range({epochs}):")
    with w.block():
        w(f"{model}.train()")
        w(f"for {step}, (x, y) in {batches}:")
        with w.block():
            _step(w, plan, model, opt, crit, step, update)
            if "smoothed-loss" in plan.extras:
                w("running_loss = 0.98 * running_loss + 0.02 * loss.item()")
            if plan.run == "named":
                w(f"if {epoch} * len({loader}) + {step} >= MAX_STEPS:")
                with w.block():
                    w("break")
        if "lr-gamma" in plan.extras:
            w(f"{r('scheduler')}.step()")
        _validate(w, plan)


def _step(w: _Writer, plan: Plan, model: str, opt: str, crit: str, step: str, update: str) -> None:
    """One batch: forward, loss (and consistency with the teacher), backward, step, update."""
    torch, teacher, order = plan.names["torch"], plan.teacher, plan.order
    if order == "before-step" and plan.loop in ("plain", "amp"):
        w(update, tag="update")  # first thing in the iteration, before the step
    if plan.loop == "amp":
        w(f'with {torch}.autocast(device_type="cuda", dtype={torch}.float16):')
        with w.block():
            w(f"out = {model}(x)")
            w(f"loss = {crit}(out, y)")
    else:
        w(f"out = {model}(x)")
        w(f"loss = {crit}(out, y)")
    if teacher is not None:
        w(f"with {torch}.no_grad():")
        with w.block():
            w(f"target = {plan.ref('teacher')}.module(x).softmax(dim=1)")
        w("loss = loss + 0.5 * F.mse_loss(out.softmax(dim=1), target)")
    if plan.loop == "plain":
        w(f"{opt}.zero_grad()")
        w("loss.backward()")
        w(f"{opt}.step()")
        _after_step(w, plan, update)
    elif plan.loop == "amp":
        scaler = plan.ref("scaler")
        w(f"{opt}.zero_grad()")
        w(f"{scaler}.scale(loss).backward()")
        w(f"{scaler}.step({opt})")
        w(f"{scaler}.update()")
        _after_step(w, plan, update)
    elif plan.loop == "accumulate":
        w("(loss / ACCUM).backward()")
        w(f"if ({step} + 1) % ACCUM == 0:")
        with w.block():
            w(f"{torch}.nn.utils.clip_grad_norm_({model}.parameters(), 1.0)")
            if order == "before-step":
                w(update, tag="update")
            w(f"{opt}.step()")
            w(f"{opt}.zero_grad()")
            _after_step(w, plan, update)
        if order == "outside-guard":
            w(update, tag="update")  # on every micro-batch
    else:
        accelerator = plan.ref("accelerator")
        w(f"with {accelerator}.accumulate({model}):")
        with w.block():
            w(f"{accelerator}.backward(loss)")
            w(f"{opt}.step()")
            w(f"{opt}.zero_grad()")
            if order == "outside-guard":
                w(update, tag="update")  # on every micro-batch
            elif order == "sync-inside":
                w(f"if {accelerator}.sync_gradients:")
                with w.block():
                    _after_step(w, plan, update)
        if order != "sync-inside" and (order == "after-step" or _companions(plan)):
            w(f"if {accelerator}.sync_gradients:")
            with w.block():
                _after_step(w, plan, update)


def _companions(plan: Plan) -> bool:
    """Other averages updated next to the main one (a teacher, a DINO-style teacher)."""
    return plan.teacher is not None or "dino-teacher" in plan.extras


def _after_step(w: _Writer, plan: Plan, update: str) -> None:
    if plan.order in ("after-step", "sync-inside"):
        if plan.device == "documented" and plan.flavor.key == "diffusers":
            # diffusers' --offload_ema: pinned memory, asynchronous copies around the update.
            ema = plan.ref("ema")
            w(f"{ema}.to(device, non_blocking=True)")
            w(update, tag="update")
            w(f'{ema}.to("cpu", non_blocking=True)')
        else:
            w(update, tag="update")
    teacher = plan.teacher
    if teacher is not None:
        method = "update" if teacher.api == "timm" else "update_parameters"
        w(f"{plan.ref('teacher')}.{method}({plan.ref('model')})")
    if "dino-teacher" in plan.extras:
        model, dino = plan.ref("model"), plan.ref("dino_teacher")
        w(f"with {plan.names['torch']}.no_grad():")
        with w.block():
            w(f"for p_s, p_t in zip({model}.parameters(), {dino}.parameters()):")
            with w.block():
                w("p_t.mul_(TEACHER_MOMENTUM).add_((1 - TEACHER_MOMENTUM) * p_s.detach())")
