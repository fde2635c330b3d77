"""EMA406: an averaged model that is updated and then thrown away."""

from __future__ import annotations

from ..analysis.training.swa import SwaAnalysis
from ..diagnostics import FixAvailability
from ..rule import Rule


class SwaAveragedModelUnused(Rule):
    """
    ## What it finds
    An ``AveragedModel`` (SWA or EMA; also mmengine's ``StochasticWeightAverage`` used
    directly) whose ``update_parameters`` runs, but that is never evaluated (called),
    saved (``state_dict()``, ``torch.save``), returned, passed to another function,
    swapped into the live model (``model.load_state_dict(swa_model.module.state_dict())``)
    or kept as a submodule of an ``nn.Module`` (which saves it with its parent) or as an
    attribute of a class whose base class is defined elsewhere (which may use it). The
    object is followed through aliases, ``self.`` attributes, function arguments and
    return values; ``update_bn``, ``.to()``, ``.eval()`` and other calls that do not read
    the weights are not uses.

    ## Why it hurts training
    The averaging costs memory and time on every update, and its result is discarded:
    the evaluation and the saved checkpoint are the live model's. Often the averaged model
    was meant to be evaluated and the code still evaluates ``model``; the reported
    numbers then say nothing about SWA.

    ## Example
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, update_bn

    swa_model = AveragedModel(model)
    for epoch in range(100):
        train_one_epoch(model, train_loader)
        if epoch >= 75:
            swa_model.update_parameters(model)
    update_bn(train_loader, swa_model)
    print(evaluate(model, test_loader))
    torch.save(model.state_dict(), "final.pt")
    ```

    ## Use instead
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, update_bn

    swa_model = AveragedModel(model)
    for epoch in range(100):
        train_one_epoch(model, train_loader)
        if epoch >= 75:
            swa_model.update_parameters(model)
    update_bn(train_loader, swa_model)
    print(evaluate(swa_model, test_loader))
    torch.save(swa_model.module.state_dict(), "final.pt")
    ```

    ## Fix
    None: whether to evaluate, save or swap in the averaged model is the author's choice.
    """

    code = "EMA406"
    name = "swa-averaged-model-unused"
    summary = "Averaged model updated but never evaluated, saved, returned or swapped in"
    fix_availability = FixAvailability.NONE
    triggers = (b"AveragedModel", b"StochasticWeightAverage")
    requires = (SwaAnalysis,)

    def finish(self) -> None:
        swa = self.ctx.get(SwaAnalysis)
        for model in swa.models:
            if not model.sites or swa.uses(model):
                continue
            kind = "SWA" if model.equal else "averaged"
            self.report(
                model.obj.creation,
                f"{model.name} is updated ({len(model.sites)} update_parameters call"
                f"{'s' if len(model.sites) > 1 else ''}) but never evaluated, saved, returned "
                f"or swapped in: the {kind} weights are thrown away, and what is evaluated "
                "or saved is the live model; use it (evaluate or save "
                f"{model.name}) or drop the averaging",
            )
