"""How an EMA's horizon compares with the run it averages over.

Shared by EMA104 (a horizon too long for the run) and EMA101 (whose fixed range yields to a
run too short for it), so both rules measure the horizon and the run the same way and never
give advice the other would report."""

from __future__ import annotations

from dataclasses import dataclass

from ..objects.horizon import horizon
from ..objects.run_length import RunLength
from .decays import DecaySetting, DecaySettings

DEFAULT_FRACTION = 1 / 3
"""Largest accepted horizon, as a fraction of the run: EMA104's default ``fraction``."""


@dataclass(frozen=True)
class HorizonInRun:
    """An EMA's horizon at the end of the run, in the run's unit, and the run."""

    run: RunLength
    span: float
    end_decay: float
    span_factor: int

    def exceeds(self, fraction: float) -> bool:
        return self.span > self.run.steps * fraction


def horizon_in_run(
    settings: DecaySettings, setting: DecaySetting, decay: float | None = None
) -> HorizonInRun | None:
    """The horizon of ``setting`` (or of ``decay`` used in its place) over its known run.

    None when the run length is not known. A warmup ramp is followed to the value it reaches
    by the end of the run; the update interval (a guard, an ``update_every``) stretches it."""
    run = settings.run_length(setting)
    if run is None or run.steps <= 0:
        return None
    if run.unit == "updates":
        calls = run.steps  # counted from the loops: calls of the update, guards divided
        span_factor = setting.spec_interval
    else:
        guard = setting.interval // max(setting.spec_interval, 1)
        calls = run.steps / guard
        span_factor = setting.interval
    end_decay = setting.decay_after(calls) if decay is None else decay
    if end_decay is None or not 0.0 < end_decay < 1.0:
        return None
    return HorizonInRun(run, horizon(end_decay) * span_factor, end_decay, span_factor)


def range_fits_run(
    settings: DecaySettings,
    setting: DecaySetting,
    low: float,
    fraction: float = DEFAULT_FRACTION,
) -> bool:
    """False when the run is known and so short that a decay of ``low`` would already
    average over more of it than EMA104 accepts (its ``fraction``): a fixed range cannot
    judge such a run (a 50-step example loop is right with decay 0.9, and 0.999 would be
    EMA104's finding)."""
    per_update = low ** max(setting.interval, 1)  # ``low`` is per optimizer step
    fit = horizon_in_run(settings, setting, per_update)
    return fit is None or not fit.exceeds(fraction)
