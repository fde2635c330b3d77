"""EMA402: stochastic weight averaging that starts early in the run, or from its start."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObjects, Method
from ..analysis.objects.horizon import format_number
from ..analysis.training.batches import BatchLoops
from ..analysis.training.loops import TrainingLoops
from ..analysis.training.swa import SwaAnalysis, SwaModel, SwaStart, UpdateSite
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Option, Rule

TARGET = 0.75  # where the fix starts averaging


class SwaStartedTooEarly(Rule):
    """
    ## What it finds
    An equal-weight average (SWA) that starts before a configurable fraction of the run
    (by default half of it), where both the start and the length of the run resolve:

    - ``if epoch >= swa_start:`` (or ``>``, ``epoch + 1 >= ...``, an ``else`` branch, an
      early ``continue``) around ``update_parameters`` in a loop over
      ``range(epochs)``, with ``swa_start`` and ``epochs`` followed through constants,
      argparse defaults (``--swa_start``, ``--epochs``) and function arguments, across
      the functions of the module;
    - Lightning ``StochasticWeightAveraging(swa_epoch_start=...)`` as a fraction, or as an
      epoch compared with ``Trainer(max_epochs=...)``;
    - an mmengine ``EMAHook`` building ``StochasticWeightAverage`` with ``begin_epoch``
      (or ``begin_iter``, or neither) compared with ``train_cfg``'s ``max_epochs``
      (``max_iters``).

    It also finds ``update_parameters`` of an SWA ``AveragedModel`` called in every
    iteration of the training loop with no start condition at all.

    EMA averages (``get_ema_multi_avg_fn``) are not judged: an EMA forgets its early
    weights. Silent when the averaging loop is a phase of its own (another training loop
    runs before it, or its range names SWA: ``range(args.swa_start, epochs)``,
    ``range(swa_epochs)``) and, for updates without a condition, when
    the module loads trained weights first (fine-tuning from a checkpoint with SWA, as the
    PyTorch blog recommends), or when the loop runs over something else than the training
    run (saved checkpoints, a list of models).

    ## Why it hurts training
    SWA is an *equal* average: the weights of the first epoch count as much as those of
    the last. Averaged from the start, or from before the regular schedule has brought the
    model near a good region, the average is pulled towards early, high-loss weights and
    can be worse than the live model. The SWA paper and PyTorch's example start at about
    75-80% of a normal training budget.

    ## Example
    ```python
    from torch.optim.swa_utils import AveragedModel

    EPOCHS = 40
    SWA_START = 0
    swa_model = AveragedModel(model)
    for epoch in range(EPOCHS):
        train_one_epoch(model, train_loader)
        if epoch >= SWA_START:
            swa_model.update_parameters(model)
    ```

    ## Use instead
    ```python
    from torch.optim.swa_utils import AveragedModel

    EPOCHS = 40
    SWA_START = 30
    swa_model = AveragedModel(model)
    for epoch in range(EPOCHS):
        train_one_epoch(model, train_loader)
        if epoch >= SWA_START:
            swa_model.update_parameters(model)
    ```

    ## Shapes
    Each shape real training code uses, reported and silent: the start written where the
    loop cannot see it at once.

    ### An early `continue` before the average, the start from argparse
    ```python
    import argparse

    from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--swa-start", type=int, default=10)


    def main(model, optimizer, loader, scheduler):
        args = parser.parse_args()
        swa_model = AveragedModel(model)
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer)
            if epoch < args.swa_start:
                scheduler.step()
                continue
            swa_model.update_parameters(model)
            swa_scheduler.step()
        update_bn(loader, swa_model)
        return swa_model
    ```
    ```python
    import argparse

    from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--swa-start", type=int, default=160)


    def main(model, optimizer, loader, scheduler):
        args = parser.parse_args()
        swa_model = AveragedModel(model)
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer)
            if epoch < args.swa_start:
                scheduler.step()
                continue
            swa_model.update_parameters(model)
            swa_scheduler.step()
        update_bn(loader, swa_model)
        return swa_model
    ```

    ### The start and the run length passed to the loop's function
    ```python
    from torch.optim.swa_utils import SWALR, AveragedModel, update_bn


    def fit(model, optimizer, loader, epochs, swa_start):
        swa_model = AveragedModel(model)
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(epochs):
            train_one_epoch(model, loader, optimizer)
            if epoch >= swa_start:
                swa_model.update_parameters(model)
                swa_scheduler.step()
        update_bn(loader, swa_model)
        return swa_model


    def main(model, optimizer, loader):
        return fit(model, optimizer, loader, epochs=90, swa_start=5)
    ```
    ```python
    from torch.optim.swa_utils import SWALR, AveragedModel, update_bn


    def fit(model, optimizer, loader, epochs, swa_start):
        swa_model = AveragedModel(model)
        swa_scheduler = SWALR(optimizer, swa_lr=0.05)
        for epoch in range(epochs):
            train_one_epoch(model, loader, optimizer)
            if epoch >= swa_start:
                swa_model.update_parameters(model)
                swa_scheduler.step()
        update_bn(loader, swa_model)
        return swa_model


    def main(model, optimizer, loader):
        return fit(model, optimizer, loader, epochs=90, swa_start=70)
    ```

    ### Lightning's callback, the start as an epoch
    ```python
    import lightning as L
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    trainer = L.Trainer(
        max_epochs=100,
        callbacks=[StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=5)],
    )
    ```
    ```python
    import lightning as L
    from lightning.pytorch.callbacks import StochasticWeightAveraging

    trainer = L.Trainer(
        max_epochs=100,
        callbacks=[StochasticWeightAveraging(swa_lrs=1e-2, swa_epoch_start=75)],
    )
    ```

    ## Fix
    Unsafe (it changes the training recipe): the start setting is set to 75% of the run,
    in its own units, where it is written as a literal (at the comparison, the constant,
    the argparse default or the callback argument): ``SWA_START = 0`` with ``EPOCHS = 40``
    becomes ``SWA_START = 30``; ``swa_epoch_start=0.1`` becomes ``0.75``; an epoch number
    compared as ``epoch + 1 >= swa_start`` or ``epoch > swa_start`` is adjusted so that
    averaging begins at 75%. No fix when there is no start condition: add one.
    """

    code = "EMA402"
    name = "swa-started-too-early"
    summary = "SWA averaging starts early in the run, or with no start condition"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.UNSAFE
    fix_scope = FixScope.VALUE  # the literal may be where the start is defined
    triggers = (b"AveragedModel", b"StochasticWeightAverag")
    requires = (SwaAnalysis,)
    options = (
        Option(
            "min-start",
            float,
            0.5,
            "Earliest accepted start of SWA averaging, as a fraction of the run.",
            minimum=0.0,
            maximum=1.0,
        ),
    )

    def finish(self) -> None:
        swa = self.ctx.get(SwaAnalysis)
        for model in swa.models:
            if model.equal:
                self._loops(swa, model)
        for obj in self.ctx.get(AveragingObjects).objects:
            if obj.kind is Method.SWA and obj.spec is not None and obj.bound is not None:
                start = swa.callback_start(obj)
                if start is not None:
                    self._judge(start, obj.spec.short_name, obj.creation)

    def _loops(self, swa: SwaAnalysis, model: SwaModel) -> None:
        reported: set[int] = set()
        for site in model.sites:
            if site.outer is None:
                continue
            start = swa.start(site)
            if start is not None:
                node = start.setting if start.setting is not None else site.call
                if id(node) not in reported:
                    reported.add(id(node))
                    self._judge(start, model.name, node)
            elif not swa.conditional(site):
                self._unconditional(swa, model, site)

    def _judge(self, start: SwaStart, name: str, node: cst.CSTNode) -> None:
        minimum = self.settings["min-start"]
        if start.fraction >= minimum:
            return
        self.report(node, self._message(start, name, minimum), self._fix(start))

    def _message(self, start: SwaStart, name: str, minimum: float) -> str:
        details: list[str] = []
        value = start.value
        if value is not None and value.via:
            details.append(f"{value.via} = {format_number(value.value)}")  # type: ignore[arg-type]
        elif start.setting is None:
            details.append("the default start")
        if start.length_text:
            details.append(start.length_text)
        percent = f"{start.fraction:.0%} of the run"
        shown = f"; {', '.join(details)}" if details else ""
        length = format_number(start.length)
        if start.unit == "run":
            where = f"at {percent}{shown}"
        elif start.first <= 0:
            where = f"from the first of {length} {start.unit}s ({percent}{shown})"
        else:
            first = format_number(start.first)
            where = f"after {first} of {length} {start.unit}s ({percent}{shown})"
        return (
            f"{name} starts averaging {where}: SWA weighs every snapshot equally, so early, "
            f"high-loss weights pull the average away from the optimum; start after "
            f"{minimum:.0%} of the run (about 75% is usual)"
        )

    def _unconditional(self, swa: SwaAnalysis, model: SwaModel, site: UpdateSite) -> None:
        if swa.separate_phase(site) or swa.loads_trained_weights():
            return
        assert site.loop is not None
        trains = any(site.loop is t for t in self.ctx.get(TrainingLoops).train_loops)
        if not trains and not site.counters:
            return  # a loop over checkpoints or models, not over the run
        unit = "step" if self.ctx.get(BatchLoops).is_batch_loop(site.loop) else "epoch"
        self.report(
            site.call,
            f"{model.name}.update_parameters runs from the first {unit} on, with no start "
            "condition: SWA weighs every snapshot equally, so the early, high-loss "
            "weights pull the average away from the optimum; average only late in training "
            "(e.g. `if epoch >= swa_start:` at about 75% of the run)",
        )

    def _fix(self, start: SwaStart) -> Fix | None:
        value = start.value
        if value is None or start.setting is None:
            return None
        origin = value.origin
        new = start.setting_for(TARGET)
        if start.fractional:
            text = format_number(new)
        elif isinstance(origin, cst.Float) or (
            isinstance(value.value, float) and not isinstance(origin, cst.Integer)
        ):
            text = repr(float(new))
        else:
            text = str(int(new))
        if isinstance(origin, (cst.Integer, cst.Float)):
            replacement: cst.BaseExpression = (
                cst.Float(text) if "." in text or "e" in text else cst.Integer(text)
            )
        elif isinstance(origin, cst.SimpleString):
            replacement = cst.SimpleString(f"{origin.prefix}{origin.quote}{text}{origin.quote}")
        else:
            return None
        return Fix.unsafe(
            f"Start averaging at {TARGET:.0%} of the run: {text}",
            Edit.replace(origin, replacement),
        )
