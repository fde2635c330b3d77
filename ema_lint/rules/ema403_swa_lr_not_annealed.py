"""EMA403: SWA averages while a decaying learning-rate schedule keeps stepping."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.schedulers import LrSchedulers, ScheduleKind, Scheduler
from ..analysis.training.swa import SwaAnalysis, SwaModel, UpdateSite
from ..diagnostics import FixAvailability
from ..rule import Rule


class SwaLrNotAnnealed(Rule):
    """
    ## What it finds
    An equal-weight average (SWA, an ``AveragedModel`` without an EMA function) updated
    in the iterations of a loop in which a decaying learning-rate schedule also steps
    (``CosineAnnealingLR``, ``OneCycleLR``, ``ExponentialLR``, ``PolynomialLR``, a
    ``LinearLR`` to a lower factor, transformers' linear/cosine/polynomial schedules,
    timm's ``CosineLRScheduler``), in one of three shapes:

    - no ``SWALR`` is created at all;
    - an ``SWALR`` is created but never stepped;
    - ``SWALR`` and the regular scheduler are both stepped in the iterations that average
      (the regular one should step only before averaging starts, in the ``else`` branch).

    The scheduler is followed from where it is made to its ``.step()``, through the
    functions it is passed to (a per-batch ``scheduler.step()`` in ``train_one_epoch`` counts).

    Silent for a constant learning rate (no scheduler), for cyclic schedules
    (``CyclicLR``, ``CosineAnnealingWarmRestarts``: the SWA paper averages cyclic
    snapshots too), for step schedules (``StepLR``, ``MultiStepLR``: whether a milestone
    falls during averaging is not known), for a scheduler stepped only in the branch
    that does not average, and for EMA averages.

    ## Why it hurts training
    SWA averages weights that explore a region around an optimum, which needs a high
    learning rate while averaging. A schedule that keeps decaying to zero makes the last
    snapshots nearly the same point: the average is no better than the final weights,
    and the epochs spent averaging are wasted. ``SWALR`` switches to a constant SWA
    learning rate when averaging starts; stepped together with the regular scheduler,
    each undoes the other.

    ## Example
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel

    swa_model = AveragedModel(model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
    for epoch in range(100):
        train_one_epoch(model, train_loader, optimizer)
        scheduler.step()
        if epoch >= 75:
            swa_model.update_parameters(model)
    ```

    ## Use instead
    ```python
    import torch
    from torch.optim.swa_utils import SWALR, AveragedModel

    swa_model = AveragedModel(model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
    swa_scheduler = SWALR(optimizer, swa_lr=0.05)
    for epoch in range(100):
        train_one_epoch(model, train_loader, optimizer)
        if epoch >= 75:
            swa_model.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
    ```

    ## Shapes
    Each shape real training code uses, reported and silent; the branch shape (both
    schedulers stepped while averaging, the regular one in ``else``) is the example above.

    ### The schedule stepped per batch in a helper
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, update_bn


    def train_one_epoch(model, loader, optimizer, scheduler):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            scheduler.step()


    def main(model, optimizer, loader):
        swa_model = AveragedModel(model)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.1, total_steps=100 * len(loader)
        )
        for epoch in range(100):
            train_one_epoch(model, loader, optimizer, scheduler)
            if epoch >= 75:
                swa_model.update_parameters(model)
        update_bn(loader, swa_model)
        return swa_model
    ```
    ```python
    import torch
    from torch.optim.swa_utils import SWALR, AveragedModel, update_bn


    def train_one_epoch(model, loader, optimizer, scheduler=None):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()


    def main(model, optimizer, loader):
        swa_model = AveragedModel(model)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=0.1, total_steps=75 * len(loader)
        )
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(100):
            if epoch >= 75:
                train_one_epoch(model, loader, optimizer)
                swa_model.update_parameters(model)
                swa_scheduler.step()
            else:
                train_one_epoch(model, loader, optimizer, scheduler)
        update_bn(loader, swa_model)
        return swa_model
    ```

    ## Fix
    None: which schedule to use while averaging (SWALR's learning rate, a cyclic
    schedule) is a training decision.
    """

    code = "EMA403"
    name = "swa-lr-not-annealed"
    summary = "SWA averages while a decaying LR schedule keeps stepping (no SWALR in charge)"
    fix_availability = FixAvailability.NONE
    triggers = (b"AveragedModel",)
    requires = (SwaAnalysis, LrSchedulers)

    def finish(self) -> None:
        swa = self.ctx.get(SwaAnalysis)
        if not swa.models or not self.ctx.get(LrSchedulers).schedulers:
            return
        reported: set[int] = set()
        for model in swa.models:
            if not model.equal:
                continue
            for site in model.sites:
                for step, scheduler in swa.scheduler_steps(site):
                    if scheduler.kind is ScheduleKind.DECAYING and id(step) not in reported:
                        reported.add(id(step))
                        self._report(swa, model, site, step, scheduler)

    def _report(
        self,
        swa: SwaAnalysis,
        model: SwaModel,
        site: UpdateSite,
        step: cst.Call,
        scheduler: Scheduler,
    ) -> None:
        swalr = swa.swalr()
        name = (
            self.ctx.code(step.func.value).strip() if isinstance(step.func, cst.Attribute) else ""
        )
        what = f"{name} ({scheduler.short_name})" if name else scheduler.short_name
        if not swalr:
            how = "and no SWALR is created"
        elif not any(s.steps for s in swalr):
            how = "and the SWALR that is created is never stepped"
        elif any(s.kind is ScheduleKind.SWA for _, s in swa.scheduler_steps(site)):
            how = "together with SWALR, so each overrides the other"
        else:
            how = "while SWALR steps elsewhere"
        self.report(
            step,
            f"{what} keeps decaying the learning rate while {model.name} averages, {how}: "
            "the snapshots converge to nearly the same point and the average gains little "
            "over the final weights; during averaging step only an SWALR (or keep the "
            "rate constant or cyclic), e.g. `if epoch >= swa_start: "
            f"{model.name}.update_parameters(model); swa_scheduler.step() else: "
            f"{name or 'scheduler'}.step()`",
        )
