"""EMA407: a hand-written update_bn that sets the BatchNorm momentum to 0 (statistics frozen)."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.recalibration import LocalBnUpdates, setattr_value
from ..analysis.syntax.values import ValueResolver, literal_number
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule


def _literal_zero(node: cst.BaseExpression) -> bool:
    """``0``, ``0.0``, ``float(0)``, ``float()``, ``float("0")``: a zero spelled in place."""
    if literal_number(node) == 0:
        return True
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value in ("float", "int")
    ):
        if not node.args:
            return True
        if len(node.args) == 1 and not node.args[0].star and node.args[0].keyword is None:
            arg = node.args[0].value
            if literal_number(arg) == 0:
                return True
            if isinstance(arg, cst.SimpleString):
                try:
                    return float(arg.evaluated_value) == 0
                except (TypeError, ValueError):
                    return False
    return False


_MOMENTUM = frozenset({"momentum"})


class UpdateBnFrozenMomentum(Rule):
    """
    ## What it finds
    A BatchNorm recalibration written by hand (a function that walks a model's
    ``modules()``, touches their BatchNorm statistics and runs the model over a loader,
    whatever its name: ``bn_update``, ``recalibrate``, a copy of ``update_bn``) that sets
    the layers' ``momentum`` to ``0`` (``0.0``, ``float(0)``, ``float()``, or a constant
    that is zero) before running the batches, by assignment (``m.momentum = 0``) or with
    ``setattr(m, "momentum", 0)``.

    ## Why it hurts training
    A BatchNorm layer updates its running statistics as
    ``running = (1 - momentum) * running + momentum * batch``: with ``momentum = 0`` the
    batches change nothing. The recalibration pass runs and costs an epoch, but the SWA
    (or EMA) model keeps the statistics it had (the reset values, or the live model's),
    which do not match its averaged weights: evaluation accuracy drops, sometimes to
    chance. The cumulative average over all batches, what ``torch.optim.swa_utils.update_bn``
    does, is ``momentum = None``.

    ## Example
    ```python
    import torch


    def bn_update(loader, model):
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.reset_running_stats()
                module.momentum = 0.0
        model.train()
        with torch.no_grad():
            for images, _ in loader:
                model(images)
    ```

    ## Use instead
    ```python
    import torch


    def bn_update(loader, model):
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.reset_running_stats()
                module.momentum = None
        model.train()
        with torch.no_grad():
            for images, _ in loader:
                model(images)
    ```

    ## Fix
    Safe, where the zero is written in the assignment (a literal or ``float(...)`` of
    one): it becomes ``None``, the cumulative average the recalibration meant. A zero
    reached through a name is reported without a fix (the name may be used elsewhere).
    Setting the momentum to 0 after the batches have run (to freeze the recalibrated
    statistics) is not reported, nor a ``setattr`` whose attribute name is not the string
    ``"momentum"`` written in place.
    """

    code = "EMA407"
    name = "update-bn-frozen-momentum"
    summary = "Hand-written update_bn sets BatchNorm momentum to 0: statistics never move"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    # What the rule reports is an assignment to a layer's ``momentum`` attribute.
    trigger_groups = (
        ((b".momentum =", b".momentum=", b".momentum  =", b".momentum\t="), (b"modules",)),
        ((b'"momentum"', b"'momentum'"), (b"setattr",), (b"modules",)),
    )
    requires = (LocalBnUpdates, ValueResolver)

    def finish(self) -> None:
        local = self.ctx.get(LocalBnUpdates)
        for function, model_at, _ in local.functions.values():
            self._judge(function, model_at)

    def _judge(self, function: cst.FunctionDef, model_at: int) -> None:
        index = self.ctx.index
        model = function.params.params[model_at].name.value
        runs = [
            call
            for call in index.descendants(function, cst.Call)
            if isinstance(call, cst.Call)
            and isinstance(call.func, cst.Name)
            and call.func.value == model
            and index.enclosing(call, cst.For) is not None
        ]
        if not runs:
            return
        first_run = runs[0]
        for setting, value in self._momentum_settings(function):
            if not index.is_before(setting, first_run):
                continue  # freezing the statistics once they are recalibrated
            fix = None
            if _literal_zero(value):
                fix = Fix.safe(
                    "Set momentum to None (cumulative average)",
                    Edit.replace(value, cst.Name("None")),
                )
            else:
                resolved = self.ctx.get(ValueResolver).resolve(value)
                if resolved is None or resolved.number != 0 or isinstance(resolved.value, bool):
                    continue
            via = ""
            if fix is None:
                resolved = self.ctx.get(ValueResolver).resolve(value)
                via = f" ({resolved.via})" if resolved is not None and resolved.via else ""
            self.report(
                value,
                f"{function.name.value}() sets BatchNorm momentum to 0{via} before running "
                "the batches: the running statistics never move and the averaged model keeps "
                "statistics that do not match its weights; the cumulative average is "
                "momentum = None",
                fix,
            )

    def _momentum_settings(
        self, function: cst.FunctionDef
    ) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
        """Where ``function`` sets a ``momentum`` attribute, and the value:
        ``m.momentum = v`` and ``setattr(m, "momentum", v)``, in document order."""
        index = self.ctx.index
        found: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
        for node in index.descendants(function, (cst.Assign, cst.Call)):
            if isinstance(node, cst.Assign):
                if any(
                    isinstance(t.target, cst.Attribute) and t.target.attr.value == "momentum"
                    for t in node.targets
                ):
                    found.append((node, node.value))
                continue
            value = setattr_value(node, _MOMENTUM)
            if value is not None:
                found.append((node, value))
        return found
