"""EMA102: an averaging weight that cannot be meant."""

from __future__ import annotations

from ..analysis.objects.apis import Side, semantics_table
from ..analysis.objects.averaging import Use
from ..analysis.objects.horizon import format_number
from ..analysis.objects.triggers import FUNCTIONAL_UPDATE_EVIDENCE
from ..analysis.training.decays import DecaySetting, DecaySettings, describe_value
from ..diagnostics import FixAvailability
from ..rule import Rule


class DecayInvalid(Rule):
    """
    ## What it finds
    An averaging weight that cannot be what was meant, read in the semantics of the API
    it is passed to:

    - outside [0, 1] (most libraries raise, some silently extrapolate);
    - a decay of exactly 1 (a momentum of exactly 0): the average never moves from the
      weights it was created with;
    - for an evaluation EMA or a teacher, a decay below 0.5 (a momentum above 0.5): the
      "average" is mostly the latest weights.

    Decay-style values given to momentum-style parameters (and the reverse) are
    EMA103's finding, not this one. RL target networks are only checked for values outside
    [0, 1]: a ``tau`` of 1 is a hard copy, a legitimate idiom. Values are followed through
    constants, argparse defaults, dataclass fields and config dicts; a weight the code
    reassigns after construction (a schedule) is not judged. Hand-written updates of an
    averaged copy are judged too (``e.mul_(d).add_(p, alpha=1 - d)`` with ``d`` of 1 or
    1.5); their coefficients below 0.5 are EMA302's finding (swapped). An object that
    averages nothing is not judged: kept in a local name, never updated or applied, used
    only through other methods (``tf.train.ExponentialMovingAverage(decay=0.0)`` built for
    ``ema.average_name(var)``, to map checkpoint names).

    ## Why it hurts training
    With a decay of 1 the averaged model is the initial (often random) model for the whole
    run, and evaluating or exporting it reports garbage. With a decay of 0.3 it follows the
    live weights almost exactly: all the cost of an EMA, none of the smoothing. Values
    outside [0, 1] make the average diverge.

    ## Example
    ```python
    from timm.utils import ModelEmaV2

    ema = ModelEmaV2(model, decay=1.0)
    ```

    ## Use instead
    ```python
    from timm.utils import ModelEmaV2

    ema = ModelEmaV2(model, decay=0.9998)
    ```

    ## Fix
    None: the intended value cannot be inferred.
    """

    code = "EMA102"
    name = "ema-decay-invalid"
    summary = "EMA decay that cannot be meant (outside [0, 1], exactly 1, or below 0.5)"
    fix_availability = FixAvailability.NONE
    triggers = FUNCTIONAL_UPDATE_EVIDENCE.triggers  # the APIs, hand-written and JAX updates
    trigger_groups = FUNCTIONAL_UPDATE_EVIDENCE.groups
    requires = (DecaySettings,)

    @classmethod
    def documentation(cls) -> str:
        return (
            super().documentation()
            + "\n\n## Semantics of the averaging APIs\n\n"
            + semantics_table()
        )

    def finish(self) -> None:
        settings = self.ctx.get(DecaySettings)
        for setting in settings.settings:
            problem = self._problem(setting)
            if problem is not None and setting.expr is not None:
                node, related = settings.placement(setting, setting.expr)
                self.report(
                    node,  # type: ignore[arg-type]
                    f"{describe_value(setting)} {problem}",
                    related=related,
                )

    @staticmethod
    def _problem(setting: DecaySetting) -> str | None:
        if setting.use is Use.NOT_WEIGHTS or setting.expr is None:
            return None
        if setting.obj is not None and setting.obj.weight_reassigned:
            return None
        given = setting.given
        if given is None or setting.half_life:
            return None  # (a half-life in samples is not a weight in [0, 1])
        side = setting.weight.side
        if given < 0.0 or given > 1.0:
            return "is outside [0, 1]: the average diverges instead of smoothing"
        if setting.use not in (Use.EVAL, Use.TEACHER):
            return None
        decay = given if side is Side.OLD else 1.0 - given
        if (setting.read_from_update or setting.definition) and not 0.5 <= decay <= 1.0:
            return None  # the weights of a hand-written update swapped: EMA302
        if decay == 1.0:
            return "never moves from the weights it starts with: the average is frozen"
        if decay == 0.0:
            return "keeps only the latest weights: nothing is averaged"
        if decay < 0.5:
            if side is Side.OLD and given <= 0.01:
                return None  # a momentum-style value: EMA103
            if side is Side.NEW and given >= 0.9:
                return None  # a decay-style value: EMA103
            return (
                f"weighs the latest weights by {format_number(round(1 - decay, 6))}: the "
                "average is mostly the live model; expected a decay close to 1"
            )
        return None
