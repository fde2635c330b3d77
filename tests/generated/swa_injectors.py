"""The bugs a generated SWA script can carry (EMA401-EMA407, EMA208): one entry per bug shape.

Like ``injectors.py``, each :class:`SwaInjector` says for one rule code which ``slot`` of
the :class:`~tests.generated.swa_scripts.SwaPlan` it controls, the plans it suits
(``when``, given the slots already filled: the test fills them in :data:`SLOTS` order), how
it edits the plan, the tagged line its finding is reported on and what ``--fix`` does to
it, as the rule declares. ``tag`` and ``fix`` may depend on the plan (a Lightning callback
is reported where it is built; EMA401's fix is unsafe when the averaging loop reads two
loaders). Every slot has clean variants, legitimate code the rules stay silent on.

Interactions are constrained so that the expected set stays exact:

- an averaged model never used (EMA406, drawn before the ``update_bn`` slot) keeps
  ``update_bn`` from missing (EMA401 judges only a model that is used) and from the
  shapes that evaluate the averaged model inside the loop;
- an update with no start condition (EMA402) leaves no ``else`` branch for the regular
  scheduler, so the learning rate is then constant or cyclic (no EMA403), and no
  ``update_bn`` sits in the start condition's branch;
- a mistyped ``use_buffers`` keyword (EMA405) leaves the buffers copied, so ``update_bn``
  is then present (else EMA401 would be a second, true finding);
- a mistyped ``swa_epoch_start`` hides the start, so the start is then proper (the fix
  would reveal an EMA402);
- a hand-written ``update_bn`` (EMA407's slot) stands in for the library's only where one
  call recalibrates the model that is used, under the right keywords (EMA404's triggers
  and EMA406's use count the library's call);
- the loss computed through the averaged model (EMA208) only where the batches are read in
  the epoch loop and the averaged model is used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st

from tests.generated.scripts import Bug
from tests.generated.swa_scripts import SwaPlan

Plans = Callable[[SwaPlan], bool]
Edit = Callable[[SwaPlan, Callable], None]


@dataclass(frozen=True)
class SwaInjector:
    code: str
    name: str
    slot: str
    tag: str | Callable[[SwaPlan], str]
    fix: str | Callable[[SwaPlan], str | None] | None
    when: Plans
    inject: Edit

    def apply(self, plan: SwaPlan, draw: Callable) -> None:
        self.inject(plan, draw)
        tag = self.tag(plan) if callable(self.tag) else self.tag
        fix = self.fix(plan) if callable(self.fix) else self.fix
        plan.bugs.append(Bug(self.code, self.name, tag, fix))


def _torch(plan: SwaPlan) -> bool:
    return plan.api == "torch"


def _set(**values) -> Edit:
    def inject(plan: SwaPlan, draw: Callable) -> None:
        for key, value in values.items():
            setattr(plan, key, value)

    return inject


# EMA402 ---------------------------------------------------------------------------------------
def _early(plan: SwaPlan, draw: Callable) -> None:
    """A start within the first third of the run (``epoch > -1`` is not written)."""
    plan.start_kind = "early"
    starts = [0.1, 0.2, 0.3] if plan.comparison == ">" else [0.0, 0.05, 0.1, 0.2, 0.3]
    plan.start = draw(st.sampled_from(starts))


def _start_fix(plan: SwaPlan) -> str | None:
    """Unsafe where the start is a literal: a constant, an argparse default, a function
    default, a callback argument; none for ``int(SWA_FRACTION * epochs)``."""
    if plan.api == "torch" and plan.start_from == "fraction":
        return None
    return "unsafe"


def _start_tag(plan: SwaPlan) -> str:
    return "if" if plan.api == "torch" else "callback"


# EMA405 ---------------------------------------------------------------------------------------
_WRONG = {
    "swalr": ("swa_lrs", "swa_learning_rate", "annealing_epochs", "anneal_epoch"),
    "swalr-strategy": ("annealing_strategy",),
    "averaged": ("use_buffer",),
    "update_bn": ("dataloader", "data_loader"),
    "callback": ("swa_lr", "anneal_epochs", "swa_start", "swa_start_epoch"),
}
_KEYWORD_TAGS = {
    "swalr": "swalr",
    "averaged": "swa_model",
    "update_bn": "bn",
    "callback": "callback",
}


def _keyword(call: str) -> Edit:
    def inject(plan: SwaPlan, draw: Callable) -> None:
        wrong = draw(st.sampled_from(_WRONG[call]))
        plan.keyword = (call.split("-")[0], wrong)

    return inject


def _keyword_tag(plan: SwaPlan) -> str:
    assert plan.keyword is not None
    return _KEYWORD_TAGS[plan.keyword[0]]


_HAS_SWALR = ("swalr", "constant", "swalr-not-stepped", "both-stepped")
_ONE_UPDATE_BN = ("after", "live", "before-loop", "before-update")


INJECTORS: tuple[SwaInjector, ...] = (
    SwaInjector(
        "EMA402",
        "started-too-early",
        "start",
        _start_tag,
        _start_fix,
        when=lambda plan: True,
        inject=_early,
    ),
    SwaInjector(
        "EMA402",
        "no-start-condition",
        "start",
        "update",
        None,
        when=_torch,
        inject=_set(start_kind="unconditional"),
    ),
    SwaInjector(
        "EMA403",
        "decaying-schedule-no-swalr",
        "lr",
        "scheduler-step",
        None,
        when=lambda plan: _torch(plan) and plan.start_kind != "unconditional",
        inject=_set(lr="no-swalr"),
    ),
    SwaInjector(
        "EMA403",
        "swalr-never-stepped",
        "lr",
        "scheduler-step",
        None,
        when=lambda plan: _torch(plan) and plan.start_kind != "unconditional",
        inject=_set(lr="swalr-not-stepped"),
    ),
    SwaInjector(
        "EMA403",
        "both-schedulers-stepped",
        "lr",
        "scheduler-step",
        None,
        when=lambda plan: _torch(plan) and plan.start_kind != "unconditional",
        inject=_set(lr="both-stepped"),
    ),
    SwaInjector(
        "EMA403",
        "one-cycle-stepped-per-batch",
        "lr",
        "scheduler-step",
        None,
        when=lambda plan: _torch(plan) and plan.start_kind != "unconditional",
        inject=_set(lr="per-batch"),
    ),
    SwaInjector(
        "EMA401",
        "missing-update-bn",
        "bn",
        "swa_model",
        # Safe: one training loader of (input, target) tuples (validation loops under
        # no_grad are not loaders update_bn could take).
        "safe",
        when=lambda plan: _torch(plan) and plan.used,
        inject=_set(bn="missing", norm="batchnorm"),
    ),
    SwaInjector(
        "EMA401",
        "missing-update-bn-torchvision-resnet",
        "bn",
        "swa_model",
        "safe",
        when=lambda plan: _torch(plan) and plan.used,
        inject=_set(bn="missing", norm="resnet"),
    ),
    SwaInjector(
        "EMA404",
        "update-bn-on-live-model",
        "bn",
        "bn",
        "safe",
        when=_torch,
        inject=_set(bn="live"),
    ),
    SwaInjector(
        "EMA404",
        "update-bn-before-loop",
        "bn",
        "bn",
        "safe",
        when=_torch,
        inject=_set(bn="before-loop"),
    ),
    SwaInjector(
        "EMA404",
        "update-bn-before-update",
        "bn",
        "bn",
        "safe",
        when=lambda plan: _torch(plan) and plan.start_kind != "unconditional" and plan.used,
        inject=_set(bn="before-update"),
    ),
    SwaInjector(
        "EMA405",
        "swalr-lightning-keyword",
        "keyword",
        _keyword_tag,
        "safe",
        when=lambda plan: plan.lr in _HAS_SWALR,
        inject=_keyword("swalr"),
    ),
    SwaInjector(
        "EMA405",
        "swalr-strategy-keyword",
        "keyword",
        _keyword_tag,
        "safe",
        when=lambda plan: plan.lr in _HAS_SWALR,
        inject=_keyword("swalr-strategy"),
    ),
    SwaInjector(
        "EMA405",
        "averaged-model-use-buffer",
        "keyword",
        _keyword_tag,
        "safe",
        when=lambda plan: _torch(plan) and plan.bn in (*_ONE_UPDATE_BN, "per-epoch"),
        inject=_keyword("averaged"),
    ),
    SwaInjector(
        "EMA405",
        "update-bn-dataloader-keyword",
        "keyword",
        _keyword_tag,
        "safe",
        when=lambda plan: _torch(plan) and plan.bn in _ONE_UPDATE_BN,
        inject=_keyword("update_bn"),
    ),
    SwaInjector(
        "EMA405",
        "callback-torch-keyword",
        "keyword",
        _keyword_tag,
        "safe",
        when=lambda plan: plan.api == "lightning" and plan.start_kind == "proper",
        inject=_keyword("callback"),
    ),
    SwaInjector(
        "EMA406",
        "averaged-model-unused",
        "use",
        "swa_model",
        None,
        when=_torch,  # before the bn slot, which then keeps update_bn out of the loop
        inject=_set(used=False),
    ),
)


@dataclass(frozen=True)
class SwaClean:
    """A legitimate variant of a slot."""

    slot: str
    name: str
    apply: Edit
    when: Plans = field(default=lambda plan: True)


def _no_change(plan: SwaPlan, draw: Callable) -> None:
    return None


def _unconditional(plan: SwaPlan) -> bool:
    return plan.start_kind == "unconditional"


CLEAN: tuple[SwaClean, ...] = (
    SwaClean("start", "from-75-percent", _no_change),  # plans() draws 0.75 or 0.8
    # The canonical else branch; SWALR over a constant rate; no scheduler at all; a cyclic
    # or step schedule stepped every epoch (the SWA paper averages cyclic snapshots).
    SwaClean(
        "lr",
        "swalr-in-else-branch",
        _no_change,
        lambda plan: _torch(plan) and not _unconditional(plan),
    ),
    SwaClean("lr", "swalr-constant-rate", _set(lr="constant"), _torch),
    SwaClean("lr", "constant-rate", _set(lr="none"), _torch),
    SwaClean("lr", "cyclic-schedule", _set(lr="cyclic"), _torch),
    SwaClean("lr", "step-schedule", _set(lr="step"), _torch),
    SwaClean("lr", "lightning-callback", _no_change, lambda plan: plan.api == "lightning"),
    # update_bn after the loop, or after the update before a per-epoch evaluation; buffers
    # averaged; a model the module shows without BatchNorm; Lightning's own BN pass.
    SwaClean("bn", "update-bn-after-loop", _no_change, _torch),
    SwaClean(
        "bn",
        "update-bn-each-epoch-after-update",
        _set(bn="per-epoch"),
        lambda plan: _torch(plan) and not _unconditional(plan) and plan.used,
    ),
    SwaClean("bn", "use-buffers", _set(bn="use-buffers"), _torch),
    SwaClean(
        "bn",
        "layernorm-model",
        _set(bn="no-batchnorm"),
        lambda plan: _torch(plan) and plan.norm == "layernorm",
    ),
    SwaClean("bn", "lightning-callback", _no_change, lambda plan: plan.api == "lightning"),
    SwaClean("keyword", "right-keywords", _no_change),
    SwaClean("use", "evaluated-and-saved", _no_change),
)


# EMA407 and EMA208 ------------------------------------------------------------------------------
def _recalibrates_once(plan: SwaPlan) -> bool:
    """One ``update_bn`` after the loop (or after each update), under its own keywords, of
    a model that is used: a hand-written copy can stand in for it (EMA406 counts a call of
    a local function as a use)."""
    return (
        _torch(plan)
        and plan.used
        and plan.bn in ("after", "per-epoch")
        and (plan.keyword is None or plan.keyword[0] != "update_bn")
    )


def _trains_inline(plan: SwaPlan) -> bool:
    """Batches read in the epoch loop of a torch script whose averaged model is used (a
    model never used is EMA406's, and a model trained through is used)."""
    return _torch(plan) and plan.batches == "inline" and plan.used


INJECTORS += (
    SwaInjector(
        "EMA407",
        "local-update-bn-momentum-zero",
        "recalibration",
        "momentum",
        "safe",
        when=_recalibrates_once,
        inject=_set(recalibration="zero"),
    ),
    SwaInjector(
        "EMA407",
        "local-update-bn-momentum-float-zero",
        "recalibration",
        "momentum",
        "safe",
        when=_recalibrates_once,
        inject=_set(recalibration="float-zero"),
    ),
    SwaInjector(
        "EMA208",
        "loss-through-averaged-model",
        "loss",
        "loss",
        None,
        when=_trains_inline,
        inject=_set(loss="averaged"),
    ),
)

CLEAN += (
    SwaClean("recalibration", "library-update-bn", _no_change),
    SwaClean(
        "recalibration",
        "local-update-bn-cumulative",
        _set(recalibration="none"),
        _recalibrates_once,
    ),
    SwaClean("loss", "live-model-loss", _no_change),
)

SLOTS = ("start", "lr", "use", "bn", "keyword", "recalibration", "loss")
