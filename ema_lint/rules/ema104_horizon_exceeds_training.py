"""EMA104: an EMA whose horizon is a large part of the whole run."""

from __future__ import annotations

import math

from ..analysis.objects.apis import semantics_table
from ..analysis.objects.averaging import Use
from ..analysis.objects.horizon import format_count, half_life
from ..analysis.objects.triggers import FUNCTIONAL_UPDATE_EVIDENCE
from ..analysis.syntax.test_code import JUDGE_TESTS, TestCode
from ..analysis.training.decays import DecaySettings, describe_interval, describe_value
from ..analysis.training.run_fit import DEFAULT_FRACTION, horizon_in_run
from ..diagnostics import FixAvailability
from ..rule import Option, Rule


class HorizonExceedsTraining(Rule):
    """
    ## What it finds
    An evaluation EMA whose horizon, about ``1 / (1 - decay)`` updates times its update
    interval, is more than a third (configurable) of the number of steps the run makes,
    where that number can be read from the code:

    - the loops around the EMA's update (``for epoch in range(EPOCHS): for step in
      range(STEPS_PER_EPOCH)``, ``while step < max_steps``), divided by an accumulation
      guard (``if (i + 1) % accum == 0``) around the update;
    - a Lightning ``Trainer(max_steps=...)``, or ``max_epochs`` times an integer
      ``limit_train_batches``, divided by ``accumulate_grad_batches``;
    - an mmengine ``train_cfg`` with ``max_iters``;
    - settings named for it (argparse defaults, module constants, the entries the
      module's ``get_config()`` sets, as jaxline's ``config.training_steps``):
      ``max_steps``, ``max_train_steps``, ``total_steps``, ``training_steps``..., or
      ``epochs`` x ``steps_per_epoch`` divided by ``gradient_accumulation_steps``.

    The horizon is taken at the end of the run: a warmup that ramps the decay (diffusers,
    ema-pytorch, torch-ema, ultralytics, mmdet's ``ExpMomentumEMA``) is followed to the value
    it reaches by then, so a ramp that is still far from its ceiling is not flagged.

    A half-life in images is turned into a per-step decay at the batch size the updates are
    given: EDM2's ``TraditionalEMA(net, halflife_Mimg=2.0)`` updated with ``ema.update(
    cur_nimg, batch_size=256)`` decays by ``0.5 ** (256 / 2e6)`` per step; its rampup
    (``rampup_ratio``, a half-life of at most that share of the images seen) is followed
    like any warmup. When the batch size is not known, it is not judged.

    ## Why it hurts training
    An EMA is an average over roughly its horizon's worth of recent weights. If the horizon
    is a large part of the run, the average at the end still carries a large share of the
    early, undertrained weights: ``exp(-T/H)`` of it is the initial model. The evaluated or
    exported averaged model is then worse than the online one, and the EMA looks useless
    when it is just too slow for this run.

    ## Example
    ```python
    from timm.utils import ModelEmaV2

    EPOCHS = 10
    STEPS_PER_EPOCH = 300


    def train(model, optimizer, batches):
        ema = ModelEmaV2(model, decay=0.9999)
        for epoch in range(EPOCHS):
            for step in range(STEPS_PER_EPOCH):
                loss = model(batches[step]).mean()
                loss.backward()
                optimizer.step()
                ema.update(model)
    ```

    ## Use instead
    ```python
    from timm.utils import ModelEmaV2

    EPOCHS = 10
    STEPS_PER_EPOCH = 300


    def train(model, optimizer, batches):
        ema = ModelEmaV2(model, decay=0.999)
        for epoch in range(EPOCHS):
            for step in range(STEPS_PER_EPOCH):
                loss = model(batches[step]).mean()
                loss.backward()
                optimizer.step()
                ema.update(model)
    ```

    ## Unit tests
    As for EMA101, the few updates of a unit test (a ``test_*`` function or test class of a
    test module) are the test's harness, not a training run, and are not judged; set
    ``judge-tests = true`` to judge them.

    ## Fix
    None: choose a decay whose horizon is a small part of the run (for a run of T steps,
    ``1 - 1 / (T * fraction / 3)`` or lower), or express the horizon as a half-life.
    """

    code = "EMA104"
    name = "ema-horizon-exceeds-training"
    summary = "EMA horizon is a large part of the whole training run"
    fix_availability = FixAvailability.NONE
    triggers = FUNCTIONAL_UPDATE_EVIDENCE.triggers  # the APIs, hand-written and JAX updates
    trigger_groups = FUNCTIONAL_UPDATE_EVIDENCE.groups
    requires = (DecaySettings,)
    options = (
        Option(
            "fraction",
            float,
            DEFAULT_FRACTION,
            "Largest accepted horizon, as a fraction of the run's steps.",
            minimum=0.0,
            maximum=1.0,
        ),
        JUDGE_TESTS,
    )

    @classmethod
    def documentation(cls) -> str:
        return (
            super().documentation()
            + "\n\n## Semantics of the averaging APIs\n\n"
            + semantics_table()
        )

    def finish(self) -> None:
        settings = self.ctx.get(DecaySettings)
        fraction = self.settings["fraction"]
        for setting in settings.settings:
            if setting.use is not Use.EVAL or (
                setting.expr is None and setting.interval_expr is None
            ):
                continue
            if setting.obj is not None and setting.obj.weight_reassigned:
                continue
            if setting.unused_default:
                continue
            if not self.settings["judge-tests"] and self.ctx.get(TestCode).holds(
                setting.bound.call, setting.node
            ):
                continue  # a unit test's run is the test harness, its horizon deliberate
            if setting.decay is None or not 0.5 <= setting.decay < 1.0:
                continue
            fit = horizon_in_run(settings, setting)
            if fit is None or not fit.exceeds(fraction):
                continue
            run, span, end_decay = fit.run, fit.span, fit.end_decay
            node, related = settings.placement(setting, setting.interval_expr)
            ramp = ""
            if setting.ramp is not None:
                ramp = f", the warmup reaching a decay of {end_decay:.6g} by the end"
            share = math.exp(-run.steps / span) * 100
            self.report(
                node,  # type: ignore[arg-type]
                f"{describe_value(setting)}{describe_interval(setting)} averages over about "
                f"{format_count(span)} {run.unit} (half-life "
                f"{format_count(half_life(end_decay) * fit.span_factor)}{ramp}), more than "
                f"{fraction * 100:.0f}% of the {format_count(run.steps)}-{run.unit[:-1]} run "
                f"({run.via}): about {share:.0f}% of the final average is still the initial "
                "weights",
                related=related,
            )
