"""Learning-rate schedulers of a module: what each does to the LR, and where it is stepped.

Stochastic weight averaging needs a high, constant (or cyclic) learning rate while it
averages: the snapshots must be different points around the optimum. A schedule that keeps
decaying to zero during averaging makes them the same point. Whether a schedule decays is a
fact of its class (``CosineAnnealingLR``, ``OneCycleLR``, transformers'
``get_cosine_schedule_with_warmup`` decay; ``CyclicLR`` and warm restarts cycle; ``StepLR``
drops at milestones the code may place before averaging starts), so it is kept here as a
table. Schedulers are followed from their creation to their ``.step()`` calls through
names, parameters and ``self.`` attributes (``Origins``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable
from ema_lint.analysis.syntax.origins import Origins
from ema_lint.analysis.syntax.values import ValueResolver


class ScheduleKind(str, enum.Enum):
    DECAYING = "decaying"  # decays towards zero over its run (cosine, linear, polynomial)
    STEP = "step"  # drops at milestones (whether during averaging depends on them)
    CYCLIC = "cyclic"  # restarts or cycles: fine for SWA
    CONSTANT = "constant"  # constant after an optional warmup
    WARMUP = "warmup"  # ramps up, then constant
    PLATEAU = "plateau"  # reacts to a metric
    SWA = "swa"  # torch.optim.swa_utils.SWALR: anneals to a constant SWA learning rate
    UNKNOWN = "unknown"  # a user function or a composition


_TORCH = "torch.optim.lr_scheduler."
_TRANSFORMERS = ("transformers.", "transformers.optimization.")
_TIMM = ("timm.scheduler.",)

_KINDS: dict[str, ScheduleKind] = {
    f"{_TORCH}CosineAnnealingLR": ScheduleKind.DECAYING,
    f"{_TORCH}OneCycleLR": ScheduleKind.DECAYING,
    f"{_TORCH}PolynomialLR": ScheduleKind.DECAYING,
    f"{_TORCH}ExponentialLR": ScheduleKind.DECAYING,
    f"{_TORCH}LinearLR": ScheduleKind.WARMUP,  # decaying when end_factor < 1
    f"{_TORCH}StepLR": ScheduleKind.STEP,
    f"{_TORCH}MultiStepLR": ScheduleKind.STEP,
    f"{_TORCH}CosineAnnealingWarmRestarts": ScheduleKind.CYCLIC,
    f"{_TORCH}CyclicLR": ScheduleKind.CYCLIC,
    f"{_TORCH}ConstantLR": ScheduleKind.CONSTANT,
    f"{_TORCH}LambdaLR": ScheduleKind.UNKNOWN,
    f"{_TORCH}MultiplicativeLR": ScheduleKind.UNKNOWN,
    f"{_TORCH}SequentialLR": ScheduleKind.UNKNOWN,
    f"{_TORCH}ChainedScheduler": ScheduleKind.UNKNOWN,
    f"{_TORCH}ReduceLROnPlateau": ScheduleKind.PLATEAU,
    "torch.optim.swa_utils.SWALR": ScheduleKind.SWA,
    **{
        f"{prefix}{name}": kind
        for prefix in _TRANSFORMERS
        for name, kind in (
            ("get_cosine_schedule_with_warmup", ScheduleKind.DECAYING),
            ("get_linear_schedule_with_warmup", ScheduleKind.DECAYING),
            ("get_polynomial_decay_schedule_with_warmup", ScheduleKind.DECAYING),
            ("get_cosine_with_hard_restarts_schedule_with_warmup", ScheduleKind.CYCLIC),
            ("get_constant_schedule", ScheduleKind.CONSTANT),
            ("get_constant_schedule_with_warmup", ScheduleKind.CONSTANT),
            ("get_scheduler", ScheduleKind.UNKNOWN),  # by name: see _NAMED
        )
    },
    "diffusers.optimization.get_scheduler": ScheduleKind.UNKNOWN,
    "diffusers.optimization.get_cosine_schedule_with_warmup": ScheduleKind.DECAYING,
    "diffusers.optimization.get_linear_schedule_with_warmup": ScheduleKind.DECAYING,
    **{
        f"{prefix}{name}": kind
        for prefix in _TIMM
        for name, kind in (
            ("CosineLRScheduler", ScheduleKind.DECAYING),
            ("PolyLRScheduler", ScheduleKind.DECAYING),
            ("TanhLRScheduler", ScheduleKind.DECAYING),
            ("StepLRScheduler", ScheduleKind.STEP),
            ("MultiStepLRScheduler", ScheduleKind.STEP),
            ("PlateauLRScheduler", ScheduleKind.PLATEAU),
        )
    },
}
# ``get_scheduler("cosine", ...)`` in transformers and diffusers.
_NAMED = {
    "linear": ScheduleKind.DECAYING,
    "cosine": ScheduleKind.DECAYING,
    "polynomial": ScheduleKind.DECAYING,
    "cosine_with_restarts": ScheduleKind.CYCLIC,
    "constant": ScheduleKind.CONSTANT,
    "constant_with_warmup": ScheduleKind.CONSTANT,
}


@dataclass(eq=False)
class Scheduler:
    """One scheduler object: the call that made it, what it does, where it is stepped."""

    creation: cst.Call
    qualname: str
    kind: ScheduleKind
    steps: list[cst.Call] = field(default_factory=list)

    @property
    def short_name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


class LrSchedulers:
    """The module's learning-rate schedulers and their ``.step()`` calls."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.schedulers: list[Scheduler] = []
        self._by_creation: dict[int, Scheduler] = {}
        self._by_step: dict[int, Scheduler] = {}
        imports = ctx.get(ImportTable)
        for call in ctx.nodes(cst.Call):
            qualname = imports.resolve(call.func, _KINDS)
            if qualname is None:
                continue
            scheduler = Scheduler(call, qualname, self._kind(call, qualname))
            self.schedulers.append(scheduler)
            self._by_creation[id(call)] = scheduler
        if not self.schedulers:
            return
        origins = ctx.get(Origins)
        for call in ctx.nodes(cst.Call):
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
                continue
            made = origins.creation(func.value)
            scheduler = self._by_creation.get(id(made)) if made is not None else None
            if scheduler is not None:
                scheduler.steps.append(call)
                self._by_step[id(call)] = scheduler

    @classmethod
    def build(cls, ctx: FileContext) -> LrSchedulers:
        return cls(ctx)

    def of_step(self, call: cst.Call) -> Scheduler | None:
        """The scheduler a ``.step()`` call steps, if known."""
        return self._by_step.get(id(call))

    def of_kind(self, *kinds: ScheduleKind) -> list[Scheduler]:
        return [s for s in self.schedulers if s.kind in kinds]

    def _kind(self, call: cst.Call, qualname: str) -> ScheduleKind:
        kind = _KINDS[qualname]
        resolver = self.ctx.get(ValueResolver)
        if qualname.endswith(".LinearLR"):
            end = _argument(call, "end_factor", 2)
            value = resolver.number(end) if end is not None else 1.0
            if value is not None and value < 1.0:
                return ScheduleKind.DECAYING
            return kind if value is not None else ScheduleKind.UNKNOWN
        if qualname.endswith(".get_scheduler"):
            name = _argument(call, "name", 0)
            value = resolver.resolve(name) if name is not None else None
            if value is not None and isinstance(value.value, str):
                return _NAMED.get(value.value.lower(), ScheduleKind.UNKNOWN)
            return ScheduleKind.UNKNOWN
        return kind


def _argument(call: cst.Call, keyword: str, position: int) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if len(positional) > position:
        return positional[position].value
    return None
