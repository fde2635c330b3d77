"""The bugs a generated training script can carry: one declarative entry per rule.

An :class:`Injector` says, for one rule code:

- ``slot``: the part of the script it controls (:class:`~tests.generated.scripts.Plan`):
  ``decay`` (the main averaging object's weight, and the run length it is judged
  against), ``teacher`` (a self-distillation teacher's weight), ``cast`` (a precision
  cast of the averaged copy), ``wrap`` (whether the copy is made before or after
  accelerate wraps the model). A slot holds at most one bug; a slot without one holds its
  clean variant;
- ``when``: the plans it can be injected into (e.g. a too-high decay only where the run
  length is unknown: otherwise EMA104, not EMA101, judges it);
- ``inject``: how it edits the plan (set a value, add a statement), and ``tag``, the
  rendered line the finding must be reported on;
- ``fix``: what ``--fix`` does to it: ``"safe"``, ``"unsafe"`` (only with
  ``--unsafe-fixes``) or None (never fixed);
- ``clean``: the legitimate code the rule must stay silent on, drawn when the slot is not
  given a bug: in-range values in every semantics, teachers in their own range, casts
  after training; the script template adds the rest (BatchNorm momentum, Adam betas,
  ``optax.ema``, a hand-made DINO teacher, LR gamma, a smoothed loss).

Adding a rule: add an ``Injector`` (or several, one per shape of the bug) to
:data:`INJECTORS`. If the bug lives in a part of the script no slot covers (the order of
the update and ``optimizer.step()``, a missing ``update_bn``), add a field to ``Plan``, a
slot name here, and render the field in ``scripts.render`` (clean by default), tagging the
line the finding belongs to. The test picks up the new entry by itself: every generated
script must then report exactly its injected bugs, and ``--fix`` must remove the fixable
ones. Its clean variant joins the precision check of every other script.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st

from ema_lint.analysis.objects.apis import Side
from tests.generated.scripts import _DEVICE_ARGUMENT, Bug, Plan, Teacher, written


@dataclass(frozen=True)
class Injector:
    code: str
    name: str
    slot: str
    tag: str
    fix: str | None
    when: Callable[[Plan], bool]
    inject: Callable[[Plan, Callable], None]
    notes: str = ""

    def apply(self, plan: Plan, draw: Callable) -> None:
        self.inject(plan, draw)
        plan.bugs.append(Bug(self.code, self.name, self.tag, self.fix))


def _decay(values: list[float]) -> Callable[[Plan, Callable], None]:
    """Set the main object's per-step decay (written in its API's own semantics)."""

    def inject(plan: Plan, draw: Callable) -> None:
        plan.value = written(draw(st.sampled_from(values)), plan.flavor.side, plan.interval)

    return inject


def _swapped(plan: Plan, draw: Callable) -> None:
    """A momentum-style value for a decay argument, or the reverse. The fix writes
    ``1 - value``, so the values are those whose complement is a clean decay for every run
    a plan can have (a decay of 0.9999 would be too slow for the shortest: EMA104)."""
    if plan.flavor.side is Side.OLD:
        plan.value = draw(st.sampled_from(["0.0002", "2e-4", "5e-4", "0.001"]))
    else:
        plan.value = draw(st.sampled_from(["0.9998", "0.9995", "0.999"]))


def _invalid(plan: Plan, draw: Callable) -> None:
    """A decay of 1, outside [0, 1], or below 0.5 (a momentum of 0.9 or more would read as a
    decay given to a momentum argument: EMA103's finding)."""
    decays = [1.0, 0.3, 1.5] if plan.flavor.side is Side.NEW else [1.0, 0.3, 0.1, 1.5]
    plan.value = written(draw(st.sampled_from(decays)), plan.flavor.side)


def _short_run(plan: Plan, draw: Callable) -> None:
    """A run of a few thousand updates, with a decay that is in range but too slow for it."""
    plan.run = "short"
    plan.epochs = draw(st.sampled_from([2, 3, 5]))
    plan.steps = draw(st.sampled_from([300, 500]))
    plan.value = written(draw(st.sampled_from([0.999, 0.9995, 0.9998])), plan.flavor.side)
    assert plan.interval == 1


def _teacher(values: list[float]) -> Callable[[Plan, Callable], None]:
    """A teacher updated next to the main object, with this per-step decay."""

    def inject(plan: Plan, draw: Callable) -> None:
        plan.teacher = Teacher(
            name=plan.names["teacher"],
            api=draw(st.sampled_from(["timm", "torch"])),
            value=written(draw(st.sampled_from(values)), Side.OLD, plan.interval),
        )

    return inject


def _cast(plan: Plan, draw: Callable) -> None:
    plan.cast = "bug"


def _wrapped(plan: Plan, draw: Callable) -> None:
    plan.wrapped_copy = True


# APIs that copy the model by name (not those that unwrap it themselves, like ultralytics'
# ModelEMA, or average a list of parameters, like diffusers and torch-ema).
_COPIES_THE_MODULE = ("timm-v2", "timm-v3", "torch-averaged", "ema-pytorch", "mmengine")


# APIs whose copy is in train mode as made (timm and ultralytics make theirs in eval mode).
_COPIES_IN_TRAIN_MODE = ("torch-averaged", "ema-pytorch", "mmengine")
_BUILT_IN_EVAL_MODE = ("timm-v2", "timm-v3", "ultralytics")
# APIs that swap the averaged weights into the live model (store / copy_to / restore).
_SWAPS = ("diffusers", "torch-ema")


def _setter(attribute: str, value: str) -> Callable[[Plan, Callable], None]:
    def inject(plan: Plan, draw: Callable) -> None:
        setattr(plan, attribute, value)

    return inject


def _order(value: str) -> Callable[[Plan, Callable], None]:
    return _setter("order", value)


def _mode(value: str) -> Callable[[Plan, Callable], None]:
    return _setter("mode", value)


def _swap(value: str) -> Callable[[Plan, Callable], None]:
    return _setter("swap", value)


def _device(value: str) -> Callable[[Plan, Callable], None]:
    return _setter("device", value)


def _long_or_unknown(plan: Plan) -> bool:
    return plan.run != "short"


INJECTORS: tuple[Injector, ...] = (
    Injector(
        "EMA101",
        "decay-too-low",
        "decay",
        "value",
        "unsafe",
        when=_long_or_unknown,
        inject=_decay([0.9, 0.95, 0.99, 0.995]),
    ),
    Injector(
        "EMA101",
        "decay-too-high",
        "decay",
        "value",
        "unsafe",
        when=lambda plan: plan.run == "unknown",
        inject=_decay([0.99999, 0.999995]),
        notes="with a known run length the upper bound is EMA104's to judge",
    ),
    Injector(
        "EMA101",
        "teacher-too-low",
        "teacher",
        "teacher",
        "unsafe",
        when=lambda plan: True,
        inject=_teacher([0.9, 0.95, 0.97]),
    ),
    Injector(
        "EMA102",
        "decay-invalid",
        "decay",
        "value",
        None,
        when=_long_or_unknown,
        inject=_invalid,
    ),
    Injector(
        "EMA103",
        "semantics-swapped",
        "decay",
        "value",
        "safe",
        when=_long_or_unknown,
        inject=_swapped,
    ),
    Injector(
        "EMA104",
        "horizon-exceeds-run",
        "decay",
        "value",
        None,
        # A warmup keeps the decay low in a short run; accelerate's sync_gradients guard
        # is not a ``% k`` guard (the run would be counted in micro-batches); one update
        # per step keeps the arithmetic of the horizon plain.
        when=lambda plan: not plan.flavor.ramped and plan.loop in ("plain", "amp"),
        inject=_short_run,
    ),
    Injector(
        "EMA207",
        "copy-of-wrapped-model",
        "wrap",
        "model-argument",
        "safe",
        when=lambda plan: plan.loop == "accelerate" and plan.flavor.key in _COPIES_THE_MODULE,
        inject=_wrapped,
    ),
    Injector(
        "EMA202",
        "update-outside-accumulation-guard",
        "order",
        "update",
        "safe",
        when=lambda plan: plan.loop in ("accumulate", "accelerate"),
        inject=_order("outside-guard"),
        notes="after the % k guard, or under accumulate() without sync_gradients",
    ),
    Injector(
        "EMA203",
        "update-before-step",
        "order",
        "update",
        "safe",
        when=lambda plan: plan.loop in ("plain", "amp", "accumulate"),
        inject=_order("before-step"),
        notes="first thing in the iteration, or first thing under the accumulation guard",
    ),
    Injector(
        "EMA204",
        "averaged-copy-in-train-mode",
        "mode",
        "evaluation",
        "safe",
        when=lambda plan: plan.flavor.key in _COPIES_IN_TRAIN_MODE,
        inject=_mode("missing"),
    ),
    Injector(
        "EMA205",
        "swap-without-restore",
        "swap",
        "copy-to",
        "safe",
        when=lambda plan: plan.flavor.key in _SWAPS,
        inject=_swap("missing"),
    ),
    Injector(
        "EMA201",
        "average-on-cpu",
        "device",
        "device",
        "safe",
        # timm documents a CPU copy (device="cpu") as a memory trade-off.
        when=lambda plan: plan.flavor.key not in _DEVICE_ARGUMENT,
        inject=_device("cpu"),
        notes='device="cpu" for AveragedModel, else a .cpu()/.to("cpu") of the copy',
    ),
    Injector(
        "EMA105",
        "averaged-copy-in-half",
        "cast",
        "cast",
        "safe",
        when=lambda plan: True,
        inject=_cast,
    ),
)


@dataclass(frozen=True)
class Clean:
    """A legitimate variant of a slot."""

    slot: str
    name: str
    apply: Callable[[Plan, Callable], None]
    when: Callable[[Plan], bool] = field(default=lambda plan: True)


def _no_change(plan: Plan, draw: Callable) -> None:
    return None


def _export_cast(plan: Plan, draw: Callable) -> None:
    plan.cast = "export"


CLEAN: tuple[Clean, ...] = (
    Clean("decay", "in-range", _no_change),  # plans() draws an in-range decay
    Clean("teacher", "none", _no_change),
    Clean("teacher", "teacher-in-its-range", _teacher([0.991, 0.995, 0.996, 0.999])),
    Clean("cast", "none", _no_change),
    Clean("cast", "export-after-training", _export_cast),
    Clean("wrap", "copy-before-wrapping", _no_change),
    Clean("order", "update-after-step", _no_change),
    Clean(
        "order",
        "sync-gradients-inside-accumulate",
        _order("sync-inside"),
        when=lambda plan: plan.loop == "accelerate",
    ),
    Clean("mode", "eval-before-evaluation", _no_change),
    Clean(
        "mode",
        "made-in-eval-mode",
        _mode("built-eval"),
        when=lambda plan: plan.flavor.key in _BUILT_IN_EVAL_MODE,
    ),
    Clean("swap", "the-flavors-own", _no_change),
    Clean("swap", "restore-in-finally", _swap("try"), when=lambda plan: plan.flavor.key in _SWAPS),
    Clean(
        "swap",
        "store-copy-restore",
        _swap("swap"),
        when=lambda plan: plan.flavor.key == "torch-ema",
    ),
    Clean("device", "the-models-device", _no_change),
    Clean(
        "device",
        "documented-offload",
        _device("documented"),
        when=lambda plan: plan.flavor.key in ("timm-v2", "timm-v3", "diffusers", "ema-pytorch"),
    ),
    Clean(
        "device",
        "saved-on-cpu-after-training",
        _device("saved"),
        when=lambda plan: plan.flavor.evaluate == "inner",
    ),
)

SLOTS = ("decay", "teacher", "cast", "wrap", "order", "mode", "swap", "device")
