"""EMA208: the averaged copy's output in the training loss: the live model learns nothing."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObject, AveragingObjects, Method, Use
from ..analysis.objects.triggers import AVERAGING_EVIDENCE, requiring
from ..analysis.syntax.vocabulary import is_averaged_name
from ..analysis.training.grad_mode import GradMode
from ..rule import Rule

# The reason AveragingObjects gives when the loss alone made the object a teacher.
_LOSS_REASON = "its output feeds a loss that is backpropagated"


class AveragedModelTrainedThrough(Rule):
    """
    ## What it finds
    An evaluation average (an SWA model, an EMA copy named and used as one) called on the
    training batch, with gradients recorded, and its output used in the loss that is
    backpropagated: a ``training_step`` that returns ``cross_entropy(self.swa_model(x),
    y)``, a loop computing ``loss = criterion(ema(x), y)`` then ``loss.backward()``.

    Not reported: teachers (DINO, BYOL, MoCo, mean teacher: named teacher / momentum
    encoder, or weighted by a teacher momentum), and an average whose output is computed
    under ``torch.no_grad()`` / ``inference_mode()`` or detached (targets, on purpose).

    ## Why it hurts training
    The average's parameters are not the ones the optimizer holds: the gradients of that
    loss land on the copy (or nowhere) and ``optimizer.step()`` does not move the live
    model for them. The live model learns nothing from the batch, the average is then
    updated from a model that does not change, and the loss curve looks fine because the
    average's gradients are computed.

    ## Example
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel



    def train(model, loader, optimizer):
        swa_model = AveragedModel(model)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(swa_model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            swa_model.update_parameters(model)
    ```

    ## Use instead
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel



    def train(model, loader, optimizer):
        swa_model = AveragedModel(model)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            swa_model.update_parameters(model)
    ```

    ## Fix
    None: the call should most likely run the live model, but which model it is is for the
    code to say.
    """

    code = "EMA208"
    name = "averaged-model-trained-through"
    summary = "Averaged copy's output used in the training loss: the live model learns nothing"
    # A loss that trains the live model (a backward pass, or Lightning's training_step)
    # AND an averaging object.
    trigger_groups = requiring((b"backward", b"training_step"), AVERAGING_EVIDENCE)
    requires = (AveragingObjects, GradMode)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        for obj in objects.objects:
            if not self._evaluation_average(obj):
                continue
            for call in objects.loss_inputs(obj):
                if self._target(call):
                    continue
                self.report(
                    call,
                    f"{obj.name}'s output is used in the loss that is backpropagated: its "
                    "parameters are not the optimizer's, so the live model learns nothing "
                    f"from this loss; call the live model (and update {obj.name} from it)",
                )

    @staticmethod
    def _evaluation_average(obj: AveragingObject) -> bool:
        if obj.use is Use.EVAL:
            return True
        # Made a teacher only by this loss (the last, decisive reason): an SWA model, or an
        # EMA named as an averaged copy.
        if obj.use is not Use.TEACHER or obj.reasons[-1:] != [_LOSS_REASON]:
            return False
        return obj.kind is Method.SWA or any(is_averaged_name(n) for n in obj.names)

    def _target(self, call: cst.Call) -> bool:
        """Computed without gradients or detached: the output is a target, on purpose."""
        if self.ctx.get(GradMode).records(call) is False:
            return True
        index = self.ctx.index
        parent = index.parent(call)
        if isinstance(parent, cst.Attribute) and parent.attr.value in ("detach", "data"):
            return True
        statement = index.statement(call)
        names: set[str] = set()
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign):
                    for target in small.targets:
                        if isinstance(target.target, cst.Name):
                            names.add(target.target.value)
        function = index.enclosing(call, cst.FunctionDef)
        if not names or function is None:
            return False
        for attribute in index.descendants(function, cst.Attribute):
            if (
                isinstance(attribute, cst.Attribute)
                and attribute.attr.value in ("detach", "detach_", "data")
                and isinstance(attribute.value, cst.Name)
                and attribute.value.value in names
            ):
                return True
        return False
