"""EMA206: the averaged copy's parameters are given to an optimizer."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObject, AveragingObjects, Use
from ..analysis.objects.triggers import OBJECT_EVIDENCE
from ..analysis.training.trainable import OptimizerReach, TrainableCopies
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule
from ..statement_edits import call_statement


class ParamsTrainable(Rule):
    """
    ## What it finds
    The parameters of an averaged copy (EMA, SWA, teacher or target network) that reach an
    optimizer while they still require gradients: ``Adam(ema.parameters())``, a parameter
    list or group that includes them (``[*model.parameters(), *ema.parameters()]``), a name
    bound to such a list, or ``.parameters()`` of a module that holds the copy as a child
    (``self.ema = copy.deepcopy(self.net)`` in a LightningModule whose
    ``configure_optimizers`` returns ``Adam(self.parameters())``).

    Silent when the copy is frozen: by its API (timm, ultralytics, ema-pytorch and mmengine
    make the copy with ``requires_grad=False``), by ``.requires_grad_(False)`` on it, or by a
    loop setting ``p.requires_grad = False`` over its parameters (MoCo's key encoder). A
    frozen copy whose parameters are all the optimizer gets is still reported: the model
    itself is then never optimized.

    An update that builds an autograd graph because a hand-written average runs outside
    ``torch.no_grad()`` is EMA303 (hand-written update tracks gradients), not this rule:
    EMA206 is only about the copy's parameters reaching an optimizer, so one bug never gets
    two codes.

    ## Why it hurts training
    The optimizer then treats the averaged weights as weights to train: whenever a gradient
    reaches them (a teacher whose output feeds the loss without ``detach``, a shared
    submodule) it steps them, and the average is trained instead of only averaged; under
    DDP, a module holding the copy as a trainable child waits for gradients that never
    come (the unused-parameter error). And ``Adam(ema.parameters())`` in place of
    ``Adam(model.parameters())`` never trains the model at all.

    ## Example
    ```python
    import copy

    import torch

    ema = copy.deepcopy(model)
    optimizer = torch.optim.AdamW([*model.parameters(), *ema.parameters()], lr=1e-4)
    ```

    ## Use instead
    ```python
    import copy

    import torch

    ema = copy.deepcopy(model)
    ema.requires_grad_(False)
    optimizer = torch.optim.AdamW([*model.parameters(), *ema.parameters()], lr=1e-4)
    ```

    ## Fix
    Safe where it is an insertion: ``<name>.requires_grad_(False)`` is inserted right after
    the statement that creates the copy (``ema = copy.deepcopy(model)``,
    ``self.ema = AveragedModel(...)``). The copy's updates do not need gradients, so freezing
    it changes nothing else. No fix when the copy is not created by an assignment, or when
    the optimizer is given nothing but the copy's parameters (which model to optimize
    instead is for you to say).
    """

    code = "EMA206"
    fix_scope = FixScope.MOVES  # its fix moves, wraps or inserts statements
    name = "ema-params-trainable"
    summary = "Averaged copy's parameters given to an optimizer"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = OBJECT_EVIDENCE.triggers
    trigger_groups = OBJECT_EVIDENCE.groups
    requires = (AveragingObjects, TrainableCopies)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        if not objects.objects:
            return
        trainable = self.ctx.get(TrainableCopies)
        if not trainable.optimizers:
            return
        for obj in objects.objects:
            if obj.use is Use.NOT_WEIGHTS or obj.virtual:
                continue
            if obj.spec is not None and obj.spec.model_copy is None:
                continue  # tensors or callbacks, not a module with parameters
            if obj.spec is None and any(u is obj.creation for u in obj.updates):
                continue  # a shadow found by its update (tensors), not a copied module
            reaches = trainable.reaches(obj)
            if not reaches:
                continue
            frozen = trainable.frozen(obj)
            for reach in reaches:
                if frozen and not reach.alone:
                    continue
                self.report(
                    reach.node, self._message(obj, reach, frozen), self._fix(obj, frozen, reach)
                )

    def _message(self, obj: AveragingObject, reach: OptimizerReach, frozen: bool) -> str:
        given = self.ctx.code(reach.node)
        if frozen:
            return (
                f"the optimizer is given only `{given}`, the parameters of the frozen averaged "
                f"copy {obj.name}: the model itself is never optimized; give it the online "
                "model's parameters"
            )
        holder = (
            f"`{given}` includes the averaged copy {obj.name} as a child module"
            if reach.how == "child"
            else f"`{given}` are the averaged copy {obj.name}'s parameters"
        )
        return (
            f"{holder}, and they require gradients: the optimizer steps them whenever a "
            "gradient reaches them, so the average is trained instead of only averaged (and "
            "DDP waits for their gradients); freeze the copy with requires_grad_(False)"
        )

    def _fix(self, obj: AveragingObject, frozen: bool, reach: OptimizerReach) -> Fix | None:
        if frozen or reach.alone:
            return None
        statement = self.ctx.index.statement(obj.creation)
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        assign = statement.body[0]
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return None
        target = assign.targets[0].target
        if not isinstance(target, (cst.Name, cst.Attribute)) or assign.value is not obj.creation:
            return None
        false = cst.Arg(cst.Name("False"))
        return Fix.safe(
            "Freeze the averaged copy",
            Edit.insert_after(statement, [call_statement(target, "requires_grad_", false)]),
        )
