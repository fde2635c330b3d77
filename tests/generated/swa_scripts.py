"""Realistic SWA training scripts, written from parts by a hypothesis strategy.

The shapes of real stochastic weight averaging code (PyTorch's SWA tutorial and
``torch.optim.swa_utils`` documentation, the original SWA repository, Lightning's
``StochasticWeightAveraging`` callback):

- torch: ``AveragedModel``, ``SWALR`` and ``update_bn`` imported by name, under aliases,
  through ``swa_utils`` or spelled ``torch.optim.swa_utils.X``; an epoch loop whose batches
  are read inline or in a ``train_one_epoch`` function; the canonical
  ``if epoch > swa_start: swa_model.update_parameters(model); swa_scheduler.step()
  else: scheduler.step()``; ``update_bn(train_loader, swa_model)`` after the loop; the
  averaged model evaluated inline or by an ``evaluate`` function, then saved; all of it in
  a ``train`` function or in a ``Trainer`` class's methods;
- Lightning: a ``LightningModule`` and a ``Trainer(max_epochs=..., callbacks=[...])``
  with a ``StochasticWeightAveraging(swa_lrs=..., swa_epoch_start=...)`` callback;
- ``swa_start`` (and the run length) from a module constant, an argparse default, a
  function default or a fraction of the run (``int(0.75 * epochs)``);
- a decaying schedule from torch (``CosineAnnealingLR``, ``OneCycleLR`` per batch) or timm
  (``CosineLRScheduler`` stepped with the epoch), a cyclic or step one, or none;
- a model with BatchNorm or only LayerNorm, built by a function of the module, or a
  torchvision ResNet;
- every name drawn at random.

A :class:`SwaPlan` holds the choices; the injectors of ``swa_injectors.py`` edit it; then
:func:`render` writes the source and records the line of every tagged piece of code (the
writer and the ``Bug`` record are those of ``scripts.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hypothesis import strategies as st

from tests.generated.scripts import _IDENTIFIERS, Bug, Script, _Writer, write_main


@dataclass
class SwaPlan:
    """Everything an SWA script will contain; injectors edit it before it is rendered."""

    api: str  # "torch" or "lightning"
    import_style: str  # "from", "alias", "module", "full"
    names: dict[str, str]
    structure: str  # "functions" or "class" (torch only)
    batches: str  # "inline" (the epoch loop reads the batches) or "function"
    epochs_from: str  # "constant", "argparse", "default"
    start_from: str  # "constant", "argparse", "default", "fraction"
    epochs: int
    start: float  # the first averaged epoch as a fraction of the run (clean: 0.75)
    comparison: str  # ">", ">="
    one_based: bool  # ``for epoch in range(1, epochs + 1)``
    timm_cosine: bool  # the cosine schedule is timm's, stepped with the epoch number
    norm: str  # "batchnorm", "layernorm" or "resnet" (torchvision's, with BatchNorm)
    device: bool  # batches moved with .to(device)
    validation: str  # "inline" or "function"
    live_validation: bool  # the live model is validated every epoch (a second loader)
    save: bool  # the averaged model is saved after training
    # Slots (clean by default) -----------------------------------------------------------------
    # The learning rate: "swalr" (canonical else-branch), "constant" (no scheduler, SWALR),
    # "constant-no-swalr", "cyclic", "step", bugs: "no-swalr", "swalr-not-stepped",
    # "both-stepped", "per-batch" (OneCycleLR stepped in the batch loop, no SWALR).
    lr: str = "swalr"
    # update_bn: "after", "per-epoch" (after the update, then an evaluation), "use-buffers",
    # "no-batchnorm"; bugs: "missing", "live", "before-loop", "before-update".
    bn: str = "after"
    # The start: "proper"; bugs: "early", "unconditional".
    start_kind: str = "proper"
    # A wrong keyword: None or (call, keyword) with call "swalr", "averaged", "update_bn",
    # "callback".
    keyword: tuple[str, str] | None = None
    used: bool = True  # the averaged model is evaluated, saved and returned
    # How the BatchNorm statistics are recalibrated: "library" (swa_utils.update_bn), or a
    # hand-written ``bn_update(loader, model)`` whose BatchNorm momentum is "none" (the
    # cumulative average) or, bugs, "zero" (``0.0``) / "float-zero" (``float(0)``).
    recalibration: str = "library"
    # The training loss: "live" (the live model's output); bug: "averaged" (the SWA
    # model's output, EMA208).
    loss: str = "live"
    swa_lr: str = "0.05"
    bugs: list[Bug] = field(default_factory=list)

    def ref(self, key: str) -> str:
        """How the training code refers to an object: ``self.<name>`` in a class."""
        name = self.names[key]
        return f"self.{name}" if self.structure == "class" and key in _ATTRIBUTES else name

    @property
    def uses_argparse(self) -> bool:
        return "argparse" in (self.epochs_from, self.start_from)

    @property
    def start_epoch(self) -> int:
        """The value written for ``swa_start`` (or ``swa_epoch_start``)."""
        first = round(self.start * self.epochs) + self.one_based
        return first - 1 if self.comparison == ">" else first


_ATTRIBUTES = frozenset(
    (
        "model",
        "swa_model",
        "optimizer",
        "scheduler",
        "swa_scheduler",
        "loader",
        "val_loader",
        "criterion",
        "epochs",
        "swa_start",
    )
)

NAME_POOLS = {
    "model": ("model", "net", "network", "classifier", "backbone"),
    "swa_model": ("swa_model", "swa_net", "averaged_model", "swa", "avg_model", "model_swa"),
    "optimizer": ("optimizer", "opt", "optim"),
    "scheduler": ("scheduler", "lr_scheduler", "sched", "cosine"),
    "swa_scheduler": ("swa_scheduler", "swa_sched", "swalr"),
    "loader": ("train_loader", "loader", "train_dl", "trainloader"),
    "val_loader": ("val_loader", "test_loader", "valid_dl"),
    "criterion": ("criterion", "loss_fn"),
    "epoch": ("epoch", "ep", "e", "i"),
    "train": ("train", "fit", "run_training", "train_swa"),
    "train_epoch": ("train_one_epoch", "train_epoch", "run_epoch"),
    "evaluate": ("evaluate", "validate", "test", "accuracy_of"),
    "trainer": ("Trainer", "SwaTrainer", "Runner"),
    "epochs": ("epochs", "num_epochs", "n_epochs"),
    "swa_start": ("swa_start", "swa_start_epoch", "start_swa"),
    "torch": ("torch", "torch", "th"),
    "nn": ("nn", "nn", "tnn"),
    "module_alias": ("swa_utils", "su", "swa"),
    "lit": ("LitClassifier", "LitModel", "Classifier"),
    "pl": ("pl", "L"),
    "bn_update": ("bn_update", "recalibrate_bn", "update_batchnorm", "bn_recalibration"),
}
# Names without a role that may be any identifier at all.
_NEUTRAL = ("epoch", "train", "train_epoch", "evaluate")
_CLASH = re.compile(r"(^|_)(val|valid|validation|eval|test|dev|train|swa|bn|lr|batch)(_|$|\d)")


def _names(draw) -> dict[str, str]:
    names: dict[str, str] = {}
    for key, pool in NAME_POOLS.items():
        taken = frozenset(names.values()) - {"torch", "nn"}
        if key in _NEUTRAL and draw(st.integers(0, 3)) == 0:
            choice = draw(
                _IDENTIFIERS.filter(
                    lambda name, taken=taken: name not in taken and not _CLASH.search(name)
                )
            )
        else:
            choice = draw(st.sampled_from([n for n in pool if n not in taken] or list(pool)))
        names[key] = choice
    if names["module_alias"] == names["swa_model"]:
        names["module_alias"] = "swa_utils"
    return names


@st.composite
def plans(draw, api: str | None = None) -> SwaPlan:
    """A clean plan: SWA from 75% of the run, SWALR in charge, update_bn after the loop."""
    api = api or draw(st.sampled_from(["torch", "torch", "torch", "lightning"]))
    plan = SwaPlan(
        api=api,
        import_style=draw(st.sampled_from(["from", "alias", "module", "full"])),
        names=_names(draw),
        structure=draw(st.sampled_from(["functions", "class"])),
        batches=draw(st.sampled_from(["inline", "function"])),
        epochs_from=draw(st.sampled_from(["constant", "argparse", "default"])),
        start_from=draw(st.sampled_from(["constant", "argparse", "default", "fraction"])),
        epochs=draw(st.sampled_from([40, 100, 200, 300])),
        start=draw(st.sampled_from([0.75, 0.8])),
        comparison=draw(st.sampled_from([">", ">="])),
        one_based=draw(st.booleans()),
        timm_cosine=draw(st.booleans()),
        norm=draw(st.sampled_from(["batchnorm", "layernorm", "resnet"])),
        device=draw(st.booleans()),
        validation=draw(st.sampled_from(["inline", "function"])),
        live_validation=draw(st.booleans()),
        save=draw(st.booleans()),
        swa_lr=draw(st.sampled_from(["0.05", "0.01", "1e-2", "SWA_LR"])),
    )
    if api == "lightning":  # the callback runs the loop, the BatchNorm pass and the swap
        plan.batches = plan.validation = "inline"
        plan.lr = plan.bn = "callback"
    return plan


# Rendering -------------------------------------------------------------------------------------
def render(plan: SwaPlan) -> Script:
    w = _Writer()
    if plan.api == "lightning":
        _lightning(w, plan)
    else:
        spell = _header(w, plan)
        _settings(w, plan)
        _helpers(w, plan)
        if plan.structure == "class":
            _trainer_class(w, plan, spell)
        else:
            _train_function(w, plan, spell)
        _main(w, plan)
    return Script("\n".join(w.lines) + "\n", plan, w.tags)  # type: ignore[arg-type]


class _Spelling:
    """How the script names the swa_utils API and the schedulers."""

    def __init__(self, averaged: str, swalr: str, update_bn: str, schedulers: str) -> None:
        self.averaged, self.swalr, self.update_bn = averaged, swalr, update_bn
        self.schedulers = schedulers  # a prefix: "" or "lr_scheduler." or "torch.optim..."


_SCHEDULERS = {
    "swalr": "CosineAnnealingLR",
    "no-swalr": "CosineAnnealingLR",
    "swalr-not-stepped": "CosineAnnealingLR",
    "both-stepped": "CosineAnnealingLR",
    "cyclic": "CosineAnnealingWarmRestarts",
    "step": "MultiStepLR",
    "per-batch": "OneCycleLR",
}


def _scheduler_class(plan: SwaPlan) -> str | None:
    name = _SCHEDULERS.get(plan.lr)
    if name == "CosineAnnealingLR" and plan.timm_cosine:
        return "CosineLRScheduler"
    return name


def _has_swalr(plan: SwaPlan) -> bool:
    return plan.lr in ("swalr", "constant", "swalr-not-stepped", "both-stepped")


def _header(w: _Writer, plan: SwaPlan) -> _Spelling:
    n = plan.names
    torch, nn = n["torch"], n["nn"]
    w('"""Train a classifier with stochastic weight averaging (SWA)."""')
    w()
    if plan.uses_argparse:
        w("import argparse")
        w()
    w("import torch" if torch == "torch" else f"import torch as {torch}")
    if plan.norm == "resnet":
        w("import torchvision")
    if nn == "nn":
        w("from torch import nn" if torch == "torch" else "import torch.nn as nn")
    else:
        w(f"import torch.nn as {nn}")
    needs_bn = plan.bn not in ("use-buffers", "no-batchnorm", "missing")
    if plan.recalibration != "library":
        needs_bn = False
    names = ["AveragedModel"]
    if _has_swalr(plan):
        names.append("SWALR")
    if needs_bn:
        names.append("update_bn")
    scheduler = _scheduler_class(plan)
    style = plan.import_style
    prefix = f"{torch}.optim.lr_scheduler."
    if scheduler == "CosineLRScheduler":
        w("from timm.scheduler import CosineLRScheduler")
        prefix = ""
    elif scheduler is not None and style == "from":
        w(f"from torch.optim.lr_scheduler import {scheduler}")
        prefix = ""
    elif scheduler is not None and style == "alias":
        w("from torch.optim import lr_scheduler")
        prefix = "lr_scheduler."
    if style == "from":
        w(f"from torch.optim.swa_utils import {', '.join(sorted(names, key=str.lower))}")
        spelled = {name: name for name in names}
    elif style == "alias":
        aliases = {"AveragedModel": "SWA", "SWALR": "SwaLR", "update_bn": "bn_update"}
        spelled = {}
        for name in names:
            w(f"from torch.optim.swa_utils import {name} as {aliases[name]}")
            spelled[name] = aliases[name]
    elif style == "module":
        alias = n["module_alias"]
        if alias == "swa_utils":
            w("from torch.optim import swa_utils")
        else:
            w(f"import torch.optim.swa_utils as {alias}")
        spelled = {name: f"{alias}.{name}" for name in names}
    else:
        spelled = {name: f"{torch}.optim.swa_utils.{name}" for name in names}
    w()
    update_bn = spelled.get("update_bn", "")
    if plan.recalibration != "library":
        update_bn = n["bn_update"]
    return _Spelling(spelled["AveragedModel"], spelled.get("SWALR", ""), update_bn, prefix)


def _settings(w: _Writer, plan: SwaPlan) -> None:
    w()
    if plan.epochs_from == "constant":
        w(f"EPOCHS = {plan.epochs}")
    if plan.start_from == "constant":
        w(f"SWA_START = {plan.start_epoch}", tag="start")
    if plan.start_from == "fraction":
        w(f"SWA_FRACTION = {plan.start}", tag="start")
    w("LR = 0.1")
    if plan.swa_lr == "SWA_LR":
        w("SWA_LR = 0.05")
    if plan.uses_argparse:
        w()
        w()
        w("def parse_args():")
        with w.block():
            w('parser = argparse.ArgumentParser(description="SWA training")')
            if plan.epochs_from == "argparse":
                w(f'parser.add_argument("--epochs", type=int, default={plan.epochs})')
            if plan.start_from == "argparse":
                w(
                    f'parser.add_argument("--swa-start", type=int, default={plan.start_epoch})',
                    tag="start",
                )
            w('parser.add_argument("--lr", type=float, default=0.1)')
            w("return parser.parse_args()")


def _helpers(w: _Writer, plan: SwaPlan) -> None:
    nn = plan.names["nn"]
    w()
    w()
    if plan.norm == "resnet":
        w("def build_model(classes=10):")
        with w.block():
            w("return torchvision.models.resnet18(num_classes=classes)")
        _helper_functions(w, plan)
        return
    w("def build_model(in_features=32, hidden=128, classes=10):")
    with w.block():
        norm = (
            f"{nn}.BatchNorm1d(hidden)" if plan.norm == "batchnorm" else f"{nn}.LayerNorm(hidden)"
        )
        w(f"return {nn}.Sequential(")
        with w.block():
            w(f"{nn}.Linear(in_features, hidden),")
            w(f"{norm},")
            w(f"{nn}.ReLU(),")
            w(f"{nn}.Linear(hidden, classes),")
        w(")")
    _helper_functions(w, plan)


def _helper_functions(w: _Writer, plan: SwaPlan) -> None:
    if plan.recalibration != "library":
        w()
        w()
        _bn_update_function(w, plan)
    if plan.batches == "function":
        w()
        w()
        _train_epoch_function(w, plan)
    if plan.validation == "function":
        w()
        w()
        _evaluate_function(w, plan)


def _bn_update_function(w: _Writer, plan: SwaPlan) -> None:
    """A copy of ``update_bn`` written by the project (the original SWA code's shape)."""
    n = plan.names
    torch, nn = n["torch"], n["nn"]
    params = ["loader", "model"] + (["device=None"] if plan.device else [])
    momentum = {"none": "None", "zero": "0.0", "float-zero": "float(0)"}[plan.recalibration]
    w(f"def {n['bn_update']}({', '.join(params)}):")
    with w.block():
        w('"""Recompute the BatchNorm running statistics for the averaged weights."""')
        w("momenta = {}")
        w("for module in model.modules():")
        with w.block():
            w(f"if isinstance(module, {nn}.modules.batchnorm._BatchNorm):")
            with w.block():
                w("module.reset_running_stats()")
                w("momenta[module] = module.momentum")
                w(f"module.momentum = {momentum}", tag="momentum")
        w("was_training = model.training")
        w("model.train()")
        w(f"with {torch}.no_grad():")
        with w.block():
            w("for x, _ in loader:")
            with w.block():
                if plan.device:
                    w("if device is not None:")
                    with w.block():
                        w("x = x.to(device)")
                w("model(x)")
        w("for module, momentum in momenta.items():")
        with w.block():
            w("module.momentum = momentum")
        w("model.train(was_training)")


def _batch(
    w: _Writer,
    plan: SwaPlan,
    model: str,
    opt: str,
    crit: str,
    loader: str,
    scheduler: str,
    swa: str | None = None,
) -> None:
    w(f"{model}.train()")
    w(f"for x, y in {loader}:")
    with w.block():
        if plan.device:
            w("x, y = x.to(device), y.to(device)")
        w(f"{opt}.zero_grad()")
        if plan.loss == "averaged" and swa is not None:
            w(f"loss = {crit}({swa}(x), y)", tag="loss")
        else:
            w(f"loss = {crit}({model}(x), y)")
        w("loss.backward()")
        w(f"{opt}.step()")
        if plan.lr == "per-batch":
            w(f"{scheduler}.step()", tag="scheduler-step")


def _train_epoch_function(w: _Writer, plan: SwaPlan) -> None:
    params = ["model", "loader", "optimizer", "criterion"]
    if plan.lr == "per-batch":
        params.append("scheduler")
    if plan.device:
        params.append("device")
    w(f"def {plan.names['train_epoch']}({', '.join(params)}):")
    with w.block():
        _batch(w, plan, "model", "optimizer", "criterion", "loader", "scheduler")


def _evaluate_function(w: _Writer, plan: SwaPlan) -> None:
    torch = plan.names["torch"]
    params = ["model", "loader"] + (["device"] if plan.device else [])
    w(f"def {plan.names['evaluate']}({', '.join(params)}):")
    with w.block():
        _evaluation_body(w, plan, "model", "loader", torch)
        w("return correct / max(total, 1)")


def _evaluation_body(w: _Writer, plan: SwaPlan, model: str, loader: str, torch: str) -> None:
    w(f"{model}.eval()")
    w("correct = total = 0")
    w(f"with {torch}.no_grad():")
    with w.block():
        w(f"for x, y in {loader}:")
        with w.block():
            if plan.device:
                w("x, y = x.to(device), y.to(device)")
            w(f"correct += ({model}(x).argmax(dim=1) == y).sum().item()")
            w("total += y.numel()")


def _evaluate(w: _Writer, plan: SwaPlan, model: str, label: str) -> None:
    """Evaluate ``model`` on the validation loader and print the accuracy."""
    n = plan.names
    val = plan.ref("val_loader")
    if plan.validation == "function":
        args = [model, val] + (["device"] if plan.device else [])
        w(f"accuracy = {n['evaluate']}({', '.join(args)})")
    else:
        _evaluation_body(w, plan, model, val, n["torch"])
        w("accuracy = correct / max(total, 1)")
    w(f'print(f"{label} accuracy: {{accuracy:.3f}}")')


def _args(plan: SwaPlan) -> str:
    return "self.args" if plan.structure == "class" else "args"


def _epochs_expr(plan: SwaPlan) -> str:
    return {
        "constant": "EPOCHS",
        "argparse": f"{_args(plan)}.epochs",
        "default": plan.ref("epochs"),
    }[plan.epochs_from]


def _parameters(plan: SwaPlan) -> list[str]:
    n = plan.names
    params = [n["model"], n["loader"], n["val_loader"]]
    if plan.uses_argparse:
        params.append("args")
    if plan.epochs_from == "default":
        params.append(f"{n['epochs']}={plan.epochs}")
    if plan.start_from == "default":
        params.append(f"{n['swa_start']}={plan.start_epoch}")
    return params


def _train_function(w: _Writer, plan: SwaPlan, spell: _Spelling) -> None:
    n = plan.names
    w()
    w()
    tag = "start" if plan.start_from == "default" else None
    w(f"def {n['train']}({', '.join(_parameters(plan))}):", tag=tag)
    with w.block():
        _setup(w, plan, spell)
        _run(w, plan, spell)


def _trainer_class(w: _Writer, plan: SwaPlan, spell: _Spelling) -> None:
    n = plan.names
    w()
    w()
    w(f"class {n['trainer']}:")
    with w.block():
        tag = "start" if plan.start_from == "default" else None
        w(f"def __init__(self, {', '.join(_parameters(plan))}):", tag=tag)
        with w.block():
            for key in ("model", "loader", "val_loader"):
                w(f"{plan.ref(key)} = {n[key]}")
            if plan.uses_argparse:
                w("self.args = args")
            if plan.epochs_from == "default":
                w(f"{plan.ref('epochs')} = {n['epochs']}")
            if plan.start_from == "default":
                w(f"{plan.ref('swa_start')} = {n['swa_start']}")
            _setup(w, plan, spell)
        w()
        w(f"def {n['train']}(self):")
        with w.block():
            _run(w, plan, spell)


def _setup(w: _Writer, plan: SwaPlan, spell: _Spelling) -> None:
    n, r = plan.names, plan.ref
    torch, nn = n["torch"], n["nn"]
    model, opt = r("model"), r("optimizer")
    if plan.device:
        w(f'device = "cuda" if {torch}.cuda.is_available() else "cpu"')
        w(f"{model}.to(device)")
    if plan.structure == "class" and plan.device:
        w("self.device = device")
    w(f"{opt} = {torch}.optim.SGD({model}.parameters(), lr=LR, momentum=0.9, weight_decay=5e-4)")
    w(f"{r('criterion')} = {nn}.CrossEntropyLoss()")
    scheduler = _scheduler_class(plan)
    epochs = _epochs_expr(plan)
    if scheduler is not None:
        arguments = {
            "CosineAnnealingLR": f"T_max={epochs}",
            "CosineAnnealingWarmRestarts": "T_0=10",
            "CosineLRScheduler": f"t_initial={epochs}, warmup_t=5",
            "MultiStepLR": "milestones=[30, 60]",
            "OneCycleLR": f"max_lr=LR, epochs={epochs}, steps_per_epoch=len({r('loader')})",
        }[scheduler]
        w(f"{r('scheduler')} = {spell.schedulers}{scheduler}({opt}, {arguments})")
    extra = ", use_buffers=True" if plan.bn == "use-buffers" else ""
    keyword = plan.keyword
    if keyword is not None and keyword[0] == "averaged":
        extra = f", {keyword[1]}=True"
    w(f"{r('swa_model')} = {spell.averaged}({model}{extra})", tag="swa_model")
    if _has_swalr(plan):
        lr_kw = "swa_lr"
        anneal = ""
        if keyword is not None and keyword[0] == "swalr":
            if keyword[1] in ("swa_lrs", "swa_learning_rate"):
                lr_kw = keyword[1]
            elif keyword[1] in ("annealing_epochs", "anneal_epoch"):
                anneal = f", {keyword[1]}=5"
            else:
                anneal = f', anneal_epochs=5, {keyword[1]}="cos"'
        w(
            f"{r('swa_scheduler')} = {spell.swalr}({opt}, {lr_kw}={plan.swa_lr}{anneal})",
            tag="swalr",
        )


def _start_test(plan: SwaPlan) -> str:
    n, r = plan.names, plan.ref
    epoch = n["epoch"]
    if plan.start_from == "constant":
        bound = "SWA_START"
    elif plan.start_from == "argparse":
        bound = f"{_args(plan)}.swa_start"
    elif plan.start_from == "default":
        bound = r("swa_start")
    else:
        bound = f"int(SWA_FRACTION * {_epochs_expr(plan)})"
    return f"{epoch} {plan.comparison} {bound}"


def _run(w: _Writer, plan: SwaPlan, spell: _Spelling) -> None:
    """The epoch loop, update_bn, the evaluation and the save of the averaged model."""
    n, r = plan.names, plan.ref
    model, swa, opt, crit = r("model"), r("swa_model"), r("optimizer"), r("criterion")
    loader = r("loader")
    epoch = n["epoch"]
    bn_args = [loader, swa if plan.bn != "live" else model]
    if plan.device:
        bn_args.append("device=device")
    if plan.keyword is not None and plan.keyword[0] == "update_bn":
        bn_args[0] = f"{plan.keyword[1]}={bn_args[0]}"
        bn_args[1] = f"model={bn_args[1]}"
    bn_call = f"{spell.update_bn}({', '.join(bn_args)})"
    if plan.device and plan.structure == "class":
        w("device = self.device")
    if plan.bn == "before-loop":
        w(bn_call, tag="bn")
    epochs = _epochs_expr(plan)
    w(
        f"for {epoch} in range(1, {epochs} + 1):"
        if plan.one_based
        else f"for {epoch} in range({epochs}):"
    )
    with w.block():
        if plan.batches == "function":
            args = [model, loader, opt, crit]
            if plan.lr == "per-batch":
                args.append(r("scheduler"))
            if plan.device:
                args.append("device")
            w(f"{n['train_epoch']}({', '.join(args)})")
        else:
            _batch(w, plan, model, opt, crit, loader, r("scheduler"), swa)
        _averaging(w, plan, bn_call)
        if plan.live_validation:
            _evaluate(w, plan, model, f"epoch {{{epoch}}}")
    if plan.bn in ("after", "live"):
        w(bn_call, tag="bn")
    if plan.used:
        _evaluate(w, plan, swa, "SWA")
        if plan.save:
            w(f'{n["torch"]}.save({swa}.module.state_dict(), "swa_model.pt")')
        w(f"return {swa}")
    else:
        _evaluate(w, plan, model, "final")
        w(f'{n["torch"]}.save({model}.state_dict(), "model.pt")')
        w(f"return {model}")


def _averaging(w: _Writer, plan: SwaPlan, bn_call: str) -> None:
    r = plan.ref
    swa, model = r("swa_model"), r("model")
    update = f"{swa}.update_parameters({model})"
    swalr_step = f"{r('swa_scheduler')}.step()"
    scheduler_step = f"{r('scheduler')}.step()"
    if _scheduler_class(plan) == "CosineLRScheduler":  # timm's: the epoch that follows
        scheduler_step = f"{r('scheduler')}.step({plan.names['epoch']} + 1)"
    if plan.start_kind == "unconditional":
        w(update, tag="update")
        if plan.lr == "constant":
            w(swalr_step)
        elif plan.lr in ("cyclic", "step"):
            w(scheduler_step)
        return
    w(f"if {_start_test(plan)}:", tag="if")
    with w.block():
        if plan.bn == "before-update":
            w(bn_call, tag="bn")
            _evaluate(w, plan, swa, "SWA")
        w(update, tag="update")
        if plan.lr in ("swalr", "constant", "both-stepped"):
            w(swalr_step)
        if plan.bn == "per-epoch":
            w(bn_call)
            _evaluate(w, plan, swa, "SWA")
    if plan.lr == "swalr":
        w("else:")
        with w.block():
            w(scheduler_step)
    elif plan.lr in ("no-swalr", "swalr-not-stepped", "both-stepped", "cyclic", "step"):
        w(scheduler_step, tag="scheduler-step")


def _main(w: _Writer, plan: SwaPlan) -> None:
    setup = [("args = parse_args()", "args")] if plan.uses_argparse else []
    write_main(w, plan.names, setup, plan.structure == "class")


# Lightning ----------------------------------------------------------------------------------
def _lightning(w: _Writer, plan: SwaPlan) -> None:
    n = plan.names
    torch, nn, pl = n["torch"], n["nn"], n["pl"]
    w('"""Train a classifier with Lightning and stochastic weight averaging."""')
    w()
    if plan.uses_argparse:
        w("import argparse")
        w()
    w(f"import lightning.pytorch as {pl}" if pl == "L" else "import pytorch_lightning as pl")
    w("import torch" if torch == "torch" else f"import torch as {torch}")
    w(f"import torch.nn as {nn}")
    package = "lightning.pytorch" if pl == "L" else "pytorch_lightning"
    callback = "StochasticWeightAveraging"
    if plan.import_style == "alias":
        w(f"from {package}.callbacks import StochasticWeightAveraging as SWA")
        callback = "SWA"
    elif plan.import_style == "module":
        w(f"from {package} import callbacks")
        callback = "callbacks.StochasticWeightAveraging"
    elif plan.import_style == "full":
        callback = f"{pl}.callbacks.StochasticWeightAveraging"
    else:
        w(f"from {package}.callbacks import StochasticWeightAveraging")
    w()
    w()
    if plan.epochs_from == "constant":
        w(f"MAX_EPOCHS = {plan.epochs}")
    fractional = plan.start_from == "fraction"
    start = str(plan.start) if fractional else str(round(plan.start * plan.epochs) + 1)
    if plan.start_from == "constant":
        w(f"SWA_EPOCH_START = {start}", tag="start")
    w("LR = 0.1")
    if plan.swa_lr == "SWA_LR":
        w("SWA_LR = 0.05")
    if plan.uses_argparse:
        w()
        w()
        w("def parse_args():")
        with w.block():
            w('parser = argparse.ArgumentParser(description="SWA training")')
            if plan.epochs_from == "argparse":
                w(f'parser.add_argument("--max-epochs", type=int, default={plan.epochs})')
            if plan.start_from == "argparse":
                kind = "float" if fractional else "int"
                w(
                    f'parser.add_argument("--swa-epoch-start", type={kind}, default={start})',
                    tag="start",
                )
            w("return parser.parse_args()")
    _helpers(w, plan)  # plans() draws inline batches and validation for Lightning
    w()
    w()
    w(f"class {n['lit']}({pl}.LightningModule):")
    with w.block():
        w("def __init__(self, lr=LR):")
        with w.block():
            w("super().__init__()")
            w(f"self.{n['model']} = build_model()")
            w("self.lr = lr")
        w()
        w("def forward(self, x):")
        with w.block():
            w(f"return self.{n['model']}(x)")
        w()
        w("def training_step(self, batch, batch_idx):")
        with w.block():
            w("x, y = batch")
            w(f"loss = {nn}.functional.cross_entropy(self(x), y)")
            w('self.log("train_loss", loss)')
            w("return loss")
        w()
        w("def configure_optimizers(self):")
        with w.block():
            w(f"return {torch}.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)")
    w()
    w()
    epochs = {"constant": "MAX_EPOCHS", "argparse": "args.max_epochs", "default": "max_epochs"}[
        plan.epochs_from
    ]
    start_expr = {
        "constant": "SWA_EPOCH_START",
        "argparse": "args.swa_epoch_start",
        "default": "swa_epoch_start",
        "fraction": start,
    }[plan.start_from]
    params = []
    if plan.uses_argparse:
        params.append("args")
    if plan.epochs_from == "default":
        params.append(f"max_epochs={plan.epochs}")
    if plan.start_from == "default":
        params.append(f"swa_epoch_start={start}")
    tag = "start" if plan.start_from == "default" else None
    w(f"def {n['train']}({', '.join([n['loader'], n['val_loader'], *params])}):", tag=tag)
    with w.block():
        lr_kw, start_kw, extra = "swa_lrs", "swa_epoch_start", ""
        if plan.keyword is not None:
            wrong = plan.keyword[1]
            if wrong in ("swa_lr", "lr"):
                lr_kw = wrong
            elif wrong in ("swa_start", "swa_start_epoch", "start_epoch"):
                start_kw = wrong
            else:
                extra = f", {wrong}=5"
        arguments = f"{lr_kw}={plan.swa_lr}, {start_kw}={start_expr}{extra}"
        built = f"{callback}({arguments})"
        line_tag = "callback"
        if plan.structure == "class":  # the callback inline in the Trainer call
            w(f"trainer = {pl}.Trainer(")
            with w.block():
                w(f"max_epochs={epochs},")
                w(f"callbacks=[{built}],", tag=line_tag)
                w('accelerator="auto",')
            w(")")
        else:
            w(f"swa_callback = {built}", tag=line_tag)
            w(f"trainer = {pl}.Trainer(max_epochs={epochs}, callbacks=[swa_callback])")
        w(f"trainer.fit({n['lit']}(), {n['loader']}, {n['val_loader']})")
        w("return trainer")
    w()
    w()
    w("def main():")
    with w.block():
        args = []
        if plan.uses_argparse:
            w("args = parse_args()")
            args.append("args")
        w(f"{n['loader']} = make_loader(train=True)")
        w(f"{n['val_loader']} = make_loader(train=False)")
        w(f"{n['train']}({', '.join([n['loader'], n['val_loader'], *args])})")
    w()
    w()
    w('if __name__ == "__main__":')
    with w.block():
        w("main()")
