"""EMA101: an EMA decay outside the sane range, judged in the API's own semantics."""

from __future__ import annotations

import libcst as cst

from ..analysis.api_calls import ApiCalls
from ..analysis.apis import API_TABLE, Side
from ..analysis.horizon import describe_decay, float_literal, format_number
from ..analysis.values import ValueResolver
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..prefilter import identifier
from ..rule import Option, Rule


class DecayOutOfRange(Rule):
    """
    ## What it finds
    An exponential moving average of the weights whose decay (the weight on the old
    average) is outside the configured range, 0.999 to 0.9999 by default. The value is read
    in the semantics of the API it is passed to: ``decay``/``beta`` weigh the old average,
    mmengine-style ``momentum`` weighs the new value and is converted (``1 - momentum``).
    Values are followed through module constants.

    ## Why it hurts training
    The decay sets how many updates the average spans: about ``1 / (1 - decay)``. At 0.99 the
    average covers about 100 updates (half-life 69), so it is hardly smoother than the live
    weights and the averaged model gains nothing. At 0.99999 it covers about 100,000 updates:
    in a typical run the average is still dominated by the first, untrained weights when
    training ends, and the averaged model is worse than the online one.

    ## Example
    ```python
    from timm.utils import ModelEmaV2

    ema = ModelEmaV2(model, decay=0.99)
    ```

    ## Use instead
    ```python
    from timm.utils import ModelEmaV2

    ema = ModelEmaV2(model, decay=0.9998)
    ```

    ## Fix
    Unsafe (applied with `--unsafe-fixes`): the value is replaced by the nearest bound of
    the range, written in the argument's own semantics, where the value is a literal (at the
    call or where the constant that holds it is defined). It changes the training dynamics
    of the average, so review it: for short fine-tunes a lower decay can be right; set the
    range in the configuration instead.
    """

    code = "EMA101"
    name = "ema-decay-out-of-range"
    summary = "EMA decay outside the configured range"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.UNSAFE
    # The APIs are found through imports, so each call's API name is in the file as a
    # whole identifier (``EMA``, not the ``EMA`` of ``SCHEMA`` or ``REMAP``).
    triggers = tuple(
        identifier(name)
        for name in sorted(
            {
                qualname.rsplit(".", 1)[-1]
                for spec in API_TABLE.specs
                if spec.weight is not None
                for qualname in (spec.qualname, *spec.aliases)
            }
        )
    )
    requires = (ApiCalls, ValueResolver)
    options = (
        Option("min", float, 0.999, "Lowest decay accepted for an evaluation EMA."),
        Option("max", float, 0.9999, "Highest decay accepted for an evaluation EMA."),
    )

    def visit_Call(self, node: cst.Call) -> None:
        bound = self.ctx.get(ApiCalls).bound(node)
        if bound is None or bound.spec.weight is None:
            return
        weight = bound.spec.weight
        expr = bound.value(weight.param)
        if expr is None:
            return
        resolved = self.ctx.get(ValueResolver).resolve(expr)
        if resolved is None or isinstance(resolved.value, (bool, str)) or resolved.value is None:
            return
        given = float(resolved.value)
        decay = given if weight.side is Side.OLD else 1.0 - given
        # Impossible or meaningless values are another rule's finding.
        if not 0.5 <= decay < 1.0:
            return
        low, high = self.settings["min"], self.settings["max"]
        if low <= decay <= high:
            return
        bound_value = low if decay < low else high
        self.report(
            expr,
            self._message(weight.param, weight.side, given, decay, low, high, resolved.via),
            self._fix(expr, resolved, weight.side, bound_value),
        )

    @staticmethod
    def _message(
        param: str, side: Side, given: float, decay: float, low: float, high: float, via: str
    ) -> str:
        if side is Side.OLD:
            what = f"EMA {param} {format_number(given)}"
        else:
            what = f"EMA {param} {format_number(given)} (a decay of {format_number(decay)})"
        source = f" (from {via})" if via else ""
        effect = (
            "barely smoother than the live weights"
            if decay < low
            else "still dominated by early weights late in training"
        )
        return (
            f"{what}{source} {describe_decay(decay)}: {effect}; "
            f"expected a decay in {format_number(low)}-{format_number(high)}"
        )

    @staticmethod
    def _fix(expr: cst.BaseExpression, resolved, side: Side, bound_value: float) -> Fix | None:
        target = resolved.origin
        if target is None:
            return None
        if isinstance(target, cst.UnaryOperation) or not isinstance(
            target, (cst.Float, cst.Integer)
        ):
            return None
        new_value = bound_value if side is Side.OLD else 1.0 - bound_value
        text = float_literal(round(new_value, 12))
        return Fix.unsafe(
            f"Set the decay to {format_number(bound_value)}",
            Edit.replace(target, cst.Float(text)),
        )
