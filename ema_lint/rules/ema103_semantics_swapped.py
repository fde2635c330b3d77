"""EMA103: a decay given where a momentum is expected, or the reverse."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

import libcst as cst

from ..analysis.objects.apis import Side, semantics_table
from ..analysis.objects.averaging import Use
from ..analysis.objects.horizon import format_number
from ..analysis.objects.triggers import UPDATE_EVIDENCE, WEIGHT_EVIDENCE, requiring
from ..analysis.training.decays import HAND_MADE, DecaySetting, DecaySettings
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule


def complement_text(text: str) -> str | None:
    """``1 - x`` written the way ``x`` was: '0.9999' -> '0.0001', '2e-4' -> '0.9998'."""
    try:
        value = Decimal(text.replace("_", ""))
    except InvalidOperation:
        return None
    result = Decimal(1) - value
    if not Decimal(0) < result < Decimal(1):
        return None
    out = format(result.normalize(), "f")
    return out if "." in out else out + ".0"


def _needs_parentheses(node: cst.BaseExpression) -> bool:
    return isinstance(
        node, (cst.BinaryOperation, cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)
    )


class DecaySemanticsSwapped(Rule):
    """
    ## What it finds
    A decay-style value (0.9 or more) passed to a parameter that weighs the *new* value,
    such as mmengine/mmdet/mmyolo ``momentum`` or optax ``step_size``, or a momentum-style
    value (0.01 or less) passed to a parameter that weighs the *old* average, such as timm
    or diffusers ``decay``, ema-pytorch ``beta`` or Keras ``ema_momentum`` (which, despite
    its name, is a decay). The parameter name says nothing reliable about which side it
    weighs; the rule keys on the API (see the table below). Values are followed through
    constants, argparse defaults, dataclass fields and config dicts, including mmengine
    config files. A class or hand-written update of the code itself is judged the same way
    when its own arithmetic and the weight's name agree: ``lerp_(p, self.momentum)`` or
    ``mul_(1 - momentum).add_(p, alpha=momentum)`` with a momentum near one (reported at the
    default or constant where it is written; EMA302 does not call such an update swapped).
    ``ema = optax.incremental_update(ema, params, 0.999)`` passes the average as the new
    tensors and binds it to the result: the two swaps cancel and the average keeps 0.999 of
    itself, so it is not reported (with a momentum there, the trees are EMA302's finding).

    ## Why it hurts training
    ``ExponentialMovingAverage(model, momentum=0.9999)`` keeps 0.01% of the old average at
    each update: the "average" is the live model, and all the benefit of averaging is gone.
    ``ModelEmaV2(model, decay=0.0002)`` does the same from the other side. Training runs,
    the averaged model looks just like the online one, and nobody notices.

    ## Example
    ```python
    from mmengine.model import ExponentialMovingAverage

    ema = ExponentialMovingAverage(model, momentum=0.9998)
    ```

    ## Use instead
    ```python
    from mmengine.model import ExponentialMovingAverage

    ema = ExponentialMovingAverage(model, momentum=0.0002)
    ```

    ## Fix
    Safe: the value becomes ``1 - value``, keeping the literal's style (``0.9998`` becomes
    ``0.0002``, ``1 - 2e-4`` becomes ``2e-4``). The literal is edited where it is written
    (at the call, or where the constant, argparse default or field is defined) when nothing
    else uses it; otherwise the argument at the call is wrapped as ``1 - value``, so that no
    other use changes. RL target networks with ``tau=1.0`` (a hard copy) are left alone.
    A value this module hands to an average in another module (an argparse default read
    there as ``args.moco_m``) is fixed only at its literal, and only with
    ``--unsafe-fixes``: the use is in the other file, and every other use of the literal
    here changes with it.
    """

    code = "EMA103"
    name = "ema-decay-semantics-swapped"
    summary = "Decay-style value given to a momentum parameter, or the reverse"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    fix_scope = FixScope.VALUE  # the literal may be where a constant is defined
    triggers = WEIGHT_EVIDENCE.triggers
    # and a hand-written update (or a class's) weighing the live weights by a ``momentum``
    trigger_groups = (*WEIGHT_EVIDENCE.groups, *requiring((b"momentum",), UPDATE_EVIDENCE))
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
            if self._swapped(setting):
                node, related = settings.placement(setting)
                self.report(
                    node,  # type: ignore[arg-type]
                    self._message(setting),
                    self._fix(setting),
                    related=related,
                )

    @staticmethod
    def _swapped(setting: DecaySetting) -> bool:
        if setting.expr is None or setting.given is None or setting.use is Use.NOT_WEIGHTS:
            return False
        if (setting.read_from_update or setting.definition) and not setting.named_momentum:
            # Swapped coefficients of a hand-written update are EMA302's; a definition's
            # side is read from its update, so a swap there is the update's, not the value's.
            # Unless the weight is named a momentum and the update weighs the new value by
            # it: name and arithmetic agree, and a value near one is the value's error.
            return False
        if setting.obj is not None and setting.obj.weight_reassigned:
            return False
        if setting.half_life:
            return False  # a half-life in samples: no side to swap
        if setting.trees_swapped:
            # ``ema = optax.incremental_update(ema, params, w)``: with a decay as ``w`` the
            # two swaps cancel; with a momentum, the trees are EMA302's finding.
            return False
        given = setting.given
        if setting.weight.side is Side.NEW:
            return 0.9 <= given < 1.0
        return 0.0 < given <= 0.01

    @staticmethod
    def _message(setting: DecaySetting) -> str:
        weight = setting.weight
        given = setting.given
        assert given is not None
        via = setting.value.via if setting.value is not None else ""
        source = f" (from {via})" if via and via != weight.param else ""
        api = setting.spec.short_name
        if setting.forwarded is not None and setting.spec is HAND_MADE:
            api = "EMA"  # the update is in another module: the related location says where
        if setting.hand_made and setting.expr is not None and weight.side is Side.NEW:
            # ``lerp_(p, self.momentum)``: the name the update weighs the live weights by.
            name = cst.Module([]).code_for_node(setting.expr)
            source = f" (from {via})" if via and via != name else ""
            return (
                f"the momentum {name} {format_number(given)}{source} weighs the live weights in "
                f"this update, so it keeps only {format_number(round(1 - given, 8))} of the old "
                f"average: averaging is effectively off; a decay of {format_number(given)} is "
                f"a momentum of {format_number(round(1 - given, 8))}"
            )
        if weight.side is Side.NEW:
            return (
                f"{api} {weight.param} {format_number(given)}{source} is the weight on the NEW "
                f"value, so this keeps only {format_number(round(1 - given, 8))} of the old "
                f"average per update: averaging is effectively off; a decay of "
                f"{format_number(given)} is {weight.param}={format_number(round(1 - given, 8))}"
            )
        return (
            f"{api} {weight.param} {format_number(given)}{source} is the weight on the OLD "
            f"average (a decay), so the average is almost exactly the latest weights; a "
            f"momentum of {format_number(given)} is {weight.param}="
            f"{format_number(round(1 - given, 8))}"
        )

    @staticmethod
    def _fix(setting: DecaySetting) -> Fix | None:
        expr = setting.expr
        value = setting.value
        assert expr is not None and value is not None
        title = f"Use 1 - {format_number(setting.given or 0.0)}"
        if setting.forwarded is not None:
            # Used in another module: only the literal can change, and everything else
            # this module does with it changes too; the evidence spans files: unsafe.
            origin = value.origin
            text = complement_text(origin.value) if isinstance(origin, cst.Float) else None
            return Fix.unsafe(title, Edit.replace(origin, cst.Float(text))) if text else None
        if setting.hand_made or setting.definition:
            # Only the literal: wrapping the update's own weight would flip its arithmetic.
            origin = value.origin
            if isinstance(origin, cst.Float) and setting.editable and not value.shared:
                text = complement_text(origin.value)
                if text is not None:
                    return Fix.safe(title, Edit.replace(origin, cst.Float(text)))
            return None
        # `1 - x` at the call: unwrap.
        if (
            isinstance(expr, cst.BinaryOperation)
            and isinstance(expr.operator, cst.Subtract)
            and isinstance(expr.left, cst.Integer)
            and expr.left.value == "1"
        ):
            inner = expr.right.with_changes(lpar=[], rpar=[])
            return Fix.safe(title, Edit.replace(expr, inner))
        origin = value.origin
        if isinstance(origin, cst.Float) and (origin is expr or not value.shared):
            text = complement_text(origin.value)
            if text is not None:
                return Fix.safe(title, Edit.replace(origin, cst.Float(text)))
        # Anything else: wrap the argument at the call, which changes only this call.
        operand = expr
        if _needs_parentheses(expr):
            operand = expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        wrapped = cst.BinaryOperation(
            cst.Integer("1"),
            cst.Subtract(
                whitespace_before=cst.SimpleWhitespace(" "),
                whitespace_after=cst.SimpleWhitespace(" "),
            ),
            operand,
        )
        return Fix.safe(title, Edit.replace(expr, wrapped))
