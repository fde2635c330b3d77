"""EMA101: an EMA decay outside the sane range, judged in the API's own semantics."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.apis import Role, Side, semantics_table
from ..analysis.objects.averaging import Use
from ..analysis.objects.horizon import describe_decay, float_literal, format_number
from ..analysis.objects.triggers import FUNCTIONAL_UPDATE_EVIDENCE
from ..analysis.syntax.test_code import JUDGE_TESTS, TestCode
from ..analysis.training.decays import (
    DecaySetting,
    DecaySettings,
    describe_interval,
    describe_value,
)
from ..analysis.training.run_fit import DEFAULT_FRACTION, range_fits_run
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Option, Rule


class DecayOutOfRange(Rule):
    """
    ## What it finds
    An exponential moving average of the weights whose decay (the weight on the old
    average) is outside the configured range, 0.999 to 0.9999 by default, for an
    evaluation EMA. The value is read the way an expert reads it:

    - **in the API's own semantics**: ``decay``/``beta``/Keras ``ema_momentum`` are the
      weight on the old average; mmengine-style ``momentum`` and optax ``step_size`` are
      the weight on the new value and are converted (``1 - momentum``); with the trees
      in the other order (``ema = optax.incremental_update(ema, params, 0.999)``, the
      average passed as the new tensors and bound to the result) ``step_size`` is the
      average's own weight, the decay, and is judged as one;
    - **where it is written**: through constants, arithmetic, argparse defaults,
      dataclass fields (dataclass, attrs, pydantic, ``NamedTuple``, flax ``struct``,
      equinox ``Module``: the value a construction gives, also for ``self.decay`` in a
      method of an averaging class written as a dataclass, as for a parameter of its
      ``__init__``), config dicts, function defaults and the arguments callers pass,
      names rebound in straight-line code (the last assignment before the use, as in
      torchvision's ``alpha = 1.0 - decay`` then ``alpha = min(1.0, alpha * adjust)``; a
      rebinding in a branch or later in a loop leaves the value unknown), the ``avg_fn``
      written for ``AveragedModel``, and in mmengine config dicts
      (``dict(type='EMAHook', momentum=...)``). The finding is reported on the literal
      itself when it is written in another statement of the module (the constant, the
      argparse default), where the fix edits it and where a suppression comment goes;
      the call that uses it is given as a related location (``related`` in JSON,
      ``relatedLocations`` in SARIF, related information in the editor). A value computed
      from one such literal and numbers written at the use (``decay=1 - rate``,
      ``one_minus_decay = 1.0 - DECAY``) is reported on that literal too (no fix is
      offered there: the literal is not the decay itself), and the default of a helper's
      or class's parameter names the calls that leave it as related locations. The same
      holds for EMA102, EMA103 and EMA104;
    - **across modules**: a value the main script writes (an argparse default, a
      dataclass field, a constant) and hands to a function of another module that feeds
      it to an average (``update_ema(..., rate=args.ema_rate)`` inside an imported
      ``train_one_epoch(..., args)``, ``ModelEmaV2(model, decay=cfg.ema_decay)`` inside
      ``create_ema(model, cfg)``; a momentum passed on every call of a model that holds
      its own momentum encoder, ``model(x1, x2, moco_m)`` running ``forward`` of a class
      defined elsewhere, also through ``DistributedDataParallel`` and the function the
      model is passed to) is judged with that average's semantics and use, and reported
      at the literal, with the call and the use in the other file as related. A name that
      starts at the value and is rescheduled from it (``m = args.moco_m``, then ``m =
      adjust_moco_momentum(epoch, args)`` where that function reads ``moco_m``) is judged
      at its start. Lists of rates are followed too: ``TrainLoop(ema_rate=args.ema_rate)``
      whose ``__init__`` parses ``[float(x) for x in ema_rate.split(",")]`` and whose
      update loops ``for rate, params in zip(self.ema_rate, self.ema_params)`` (the
      openai diffusion code), with the options made by ``add_dict_to_argparser(parser,
      defaults)``: the rate is judged when every item of the list has one value, reported
      on the string where it is written. A value a class's constructor keeps
      (``self.ema_m = ema_m``) and a method later hands to an average (``EMA(self.model,
      self.ema_m)``) is judged at the construction call that passes it; so is a rising
      schedule's start (``momentum_schedule[it]`` of ``cosine_scheduler(args.momentum_teacher,
      1, ...)``);
    - **per optimizer step**: an object that averages only every k-th step
      (``update_every``, ``interval``, ``every_n_steps``, ``update_every_n_steps``, or an
      ``if step % k == 0:`` around its update) has a per-step decay of ``D ** (1/k)``;
    - **as a ceiling** when a warmup ramps it (diffusers, ema-pytorch, torch-ema,
      ultralytics...): the message says so. A decay an update is given from a warmup
      schedule (k-diffusion's ``ema_update(model, model_ema, sched.get_value())`` with
      ``sched = EMAWarmup(power=2/3, max_value=...)``) is judged by the schedule's
      ``max_value`` and reported there, with the update as the related location; a
      ``max_value`` of 1 (its default, used with power 2/3 or 3/4 in k-diffusion's
      configs) leaves the ramp itself as the horizon and is not judged;
    - **for its use**: teachers (DINO, MoCo, BYOL, mean teacher: recognised by their names
      and by their output feeding a loss that is backpropagated) are judged against their
      own range, 0.99 to 0.9999 by default; RL target networks and EMAs of things that
      are not weights (``optax.ema`` of gradients, loss averages) are never judged, nor is
      a decay that the code reassigns after construction (a schedule);
    - **in hand-written updates** of an averaged copy (``deepcopy(model)`` named or updated
      as an average): ``e.mul_(d).add_(p, alpha=1 - d)``, ``e.lerp_(p, w)`` and
      ``torch.lerp(e, p, w, out=e)`` (a decay of ``1 - w``), ``e.copy_(d * e + (1 - d) *
      p)``, ``.data =`` and ``torch._foreach_*``
      forms, when the two coefficients resolve and sum to one; the ``% k`` guards around
      the update and around the calls of the function holding it are folded in. Adam-style
      moments, loss averages and ``tau``/``polyak`` target networks are not judged. A
      helper whose shadow is a parameter (``def update_ema(target_params, source_params,
      rate)``) is judged at each call with the rate that call passes, whatever the tensors
      passed are called; such a helper over two sequences counts when its parameters are
      named so (``target``/``source``, ``average``/``current``), when its own name says it
      averages (``def ema(xs, ys, k)``, ``average``, ``momentum_update``) and a call hands
      it weights, or when every call of the module passes an averaged copy's weights from
      inside a loop (``blend(ema_model.parameters(), model.parameters(), 0.9)`` per step;
      a one-off mix outside the loop is a merge), or, with neutral names, when every call
      passes a ``deepcopy`` of the model a loop trains and that model, once per training
      step (``step(twin.parameters(), net.parameters(), 0.9)``);
    - **in JAX**: ``jax.tree.map(lambda e, p: d * e + (1 - d) * p, ema_params, params)``,
      and a leaf-wise helper a tree map applies to an averaged tree (``lambda e, p:
      ema(e, p, decay)``, the lambda bound to a name first, the helper in another module or
      picked by name with ``getattr(utils, config.get("which_ema", "tf1_ema"))``); a
      ``decay = min(decay, (1 + t) / (10 + t))`` in the helper makes the value a ceiling.
      The same helper smoothing metrics or a loss is not judged. A value read from the
      config (``self.config.ema_decay``) that the module's ``get_config()`` sets once
      (the ml_collections / jaxline protocol) is judged and reported where it is set; so
      is one that the ``get_config()`` of another module sets for its experiment class
      deriving from the class that reads it (a variant experiment overriding its base's
      config), with the use in the base class's module as the related location.

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

    ## How long is too long
    Whether a high decay is too high depends on the length of the run, not on the
    literal: torchvision's recipe uses 0.99998 every 32 steps, EDM derives its decay from a
    half-life in images, ema-pytorch's defaults (``beta=0.9999``, ``update_every=10``) make
    a per-step decay of about 0.99999, and all are right for the runs they are used in. So
    the upper bound is applied only when nothing better is known:

    - when the run length can be read from the code, the upper bound is not applied here;
      EMA104 (ema-horizon-exceeds-training) compares the horizon with the run instead;
    - without a known run length, a per-step decay above ``max`` is reported only when its
      horizon is beyond any plausible run: from ``max-unknown-run`` (0.99999 per optimizer
      step, a horizon of 100,000 steps) on. Published recipes at 0.99993-0.99998 per step
      (iCT, DeiT, torchvision) are right for their runs and stay silent; setting ``max`` in
      the configuration applies it as the bound instead;
    - a library's own defaults (ema-pytorch's ``beta=0.9999`` with ``update_every=10``,
      Keras's ``ema_momentum=0.99``) are never judged against the built-in range: they are
      documented as correct for the runs the library targets. Setting ``min``/``max`` in
      the configuration says what suits your runs, and then every value is judged. A
      helper of the project (or a copied one, guided-diffusion's ``update_ema(...,
      rate=0.99)``) has no recipe: a value a call passes is judged even when it equals the
      helper's default;
    - a decay computed from a half-life in updates (``0.5 ** (1 / halflife)``,
      ``exp(-1/tau)``) states its horizon explicitly and is only judged against the lower
      bound; one computed from a half-life in samples (``0.5 ** (batch / halflife_nimg)``,
      StyleGAN's 10k images, about 0.9978 per step at batch 32, or EDM's 500 kimg) is the
      batch-aware form of a horizon chosen for the recipe, and is not judged by the fixed
      range at all: EMA104 compares it with the run where the run's length is known. The
      same holds for an API that takes the half-life in images (EDM2's ``TraditionalEMA(net,
      halflife_Mimg=...)``).

    The lower bound applies to any run that can hold it: an evaluation EMA over a few
    hundred steps is barely smoother than the live weights. Only a run whose length is read
    from the code and is so short that ``min`` itself would average over more than a third
    of it (EMA104's default ``fraction``) is exempt: a 50-step example loop is right with
    ``decay=0.9``, and 0.999 there would be EMA104's finding; EMA104 judges such runs.

    ## Unit tests
    A unit test of an EMA picks a decay such as 0.5 or 0.9 so that a few updates move the
    average visibly; that value says nothing about a training run. Values written in test
    code (a ``test_*`` function, a ``Test*``/``unittest.TestCase`` class or a pytest fixture
    of a module pytest would collect: ``test_*.py``, ``*_test.py``, ``conftest.py``, or any
    module under a ``tests/`` folder) are not judged. A ``def test(model)`` evaluation pass of
    a training script, or a ``test.py`` script, is not test code. Set ``judge-tests = true``
    to judge test code too.

    ## Fix
    Unsafe (applied with `--unsafe-fixes`): the value is replaced by the nearest bound of
    the range, written in the argument's own semantics and per update (so an interval is
    taken into account), where the value is a literal (at the call, or where the constant,
    argparse default or field that holds it is defined; in a hand-written update, the
    weight on the live tensor, as in ``lerp_(p, 0.1)``, is written as ``1 - bound``, and the
    two literals of ``0.9 * e + 0.1 * p`` are changed together; a pair spelled with two
    different names gets no fix). It changes the training dynamics
    of the average, so review it: for short fine-tunes a lower decay can be right; set the
    range in the configuration instead.
    """

    code = "EMA101"
    name = "ema-decay-out-of-range"
    summary = "EMA decay outside the configured range"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.UNSAFE
    fix_scope = FixScope.VALUE  # the literal may be where a constant is defined
    triggers = FUNCTIONAL_UPDATE_EVIDENCE.triggers  # the APIs, hand-written and JAX updates
    trigger_groups = FUNCTIONAL_UPDATE_EVIDENCE.groups
    requires = (DecaySettings,)
    options = (
        Option(
            "min",
            float,
            0.999,
            "Lowest per-step decay accepted for an evaluation EMA.",
            minimum=0.0,
            maximum=1.0,
            below="max",
        ),
        Option(
            "max",
            float,
            0.9999,
            "Highest per-step decay accepted for an evaluation EMA.",
            minimum=0.0,
            maximum=1.0,
        ),
        Option(
            "max-unknown-run",
            float,
            0.99999,
            "Unknown run length: decay from which one above max is reported.",
            minimum=0.0,
            maximum=1.0,
        ),
        Option(
            "teacher-min",
            float,
            0.99,
            "Lowest decay accepted for a teacher.",
            minimum=0.0,
            maximum=1.0,
            below="teacher-max",
        ),
        Option(
            "teacher-max",
            float,
            0.9999,
            "Highest decay accepted for a teacher.",
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
        for setting in settings.settings:
            self._judge(setting, settings)

    def _judge(self, setting: DecaySetting, settings: DecaySettings) -> None:
        if setting.use not in (Use.EVAL, Use.TEACHER) or setting.spec.role is Role.GRADIENT_EMA:
            return
        if setting.obj is not None and setting.obj.weight_reassigned:
            return
        if not self.settings["judge-tests"] and self.ctx.get(TestCode).holds(
            setting.bound.call, setting.node
        ):
            return  # a value picked to make a unit test's few updates observable
        if setting.unused_default:
            return  # a helper's default no call here uses: judged where a call leaves it
        node, related = settings.placement(setting, setting.interval_expr)
        decay = setting.decay
        step = setting.step_decay
        if node is None or decay is None or step is None:
            return
        if setting.expr is None and setting.interval_expr is None:
            return
        # Impossible, meaningless or swapped values are EMA102's and EMA103's findings.
        if not 0.5 <= decay < 1.0:
            return
        teacher = setting.use is Use.TEACHER
        low = self.settings["teacher-min" if teacher else "min"]
        high = self.settings["teacher-max" if teacher else "max"]
        if low <= step <= high:
            return
        if setting.is_default and self._default_range(teacher):
            return
        if step < low and not teacher and not self._range_fits(settings, setting, low):
            return  # the run is too short for the range: EMA104 judges the horizon instead
        form = setting.value.form if setting.value is not None else ""
        if form == "half-life-samples":
            return  # a horizon chosen in samples (StyleGAN's 10k images): EMA104 judges it
        if step > high:
            if form == "half-life":
                return
            if settings.run_length(setting) is not None:
                return
            if not teacher and step < self._unknown_run_bound(high):
                return  # within the recipes of long runs (0.99993-0.99998 per step)
        self.report(
            node,
            self._message(setting, step, low, high),
            self._fix(setting, low, high),
            related=related,
        )

    def _unknown_run_bound(self, high: float) -> float:
        """The per-step decay from which a value above ``max`` is reported when the run
        length is unknown: ``max`` itself when the configuration sets it."""
        if self.settings["max"] != self.option("max").default:
            return high
        return max(high, self.settings["max-unknown-run"] - 1e-8)  # 0.999 every 100 steps

    def _range_fits(self, settings: DecaySettings, setting: DecaySetting, low: float) -> bool:
        # Drawn at EMA104's configured fraction, so the case goes to EMA104 exactly when
        # EMA104 would judge ``low`` itself too long for the run.
        fraction = self.peer_setting("ema-horizon-exceeds-training", "fraction", DEFAULT_FRACTION)
        return range_fits_run(settings, setting, low, fraction)

    def _default_range(self, teacher: bool) -> bool:
        names = ("teacher-min", "teacher-max") if teacher else ("min", "max")
        return all(self.settings[n] == self.option(n).default for n in names)

    @staticmethod
    def _message(setting: DecaySetting, step: float, low: float, high: float) -> str:
        what = describe_value(setting) + describe_interval(setting)
        unit = "steps" if setting.interval > 1 else "updates"
        if step < low:
            effect = "barely smoother than the live weights"
        else:
            effect = "still dominated by early weights late in training"
        if setting.ramp is not None:
            effect += "; the warmup only approaches this value"
        if setting.value is not None and setting.value.form == "schedule-start":
            effect += "; the schedule rises from this value"
        kind = "a teacher" if setting.use is Use.TEACHER else "an evaluation EMA"
        return (
            f"{what} {describe_decay(step, unit=unit)}: {effect}; "
            f"expected a per-step decay in {format_number(low)}-{format_number(high)} for {kind}"
        )

    @staticmethod
    def _fix(setting: DecaySetting, low: float, high: float) -> Fix | None:
        if setting.expr is None or setting.value is None:
            return None
        target = setting.value.origin
        if not isinstance(target, (cst.Float, cst.Integer)):
            return None
        partner = setting.partner
        if not setting.editable and (
            partner is None
            or not isinstance(partner[0], (cst.Float, cst.Integer))
            or target is not setting.expr
            or setting.interval != 1
        ):
            return None  # the other coefficient is not a literal next to it: it would go stale
        step = setting.step_decay
        assert step is not None
        bound = low if step < low else high
        k = setting.interval
        side = setting.weight.side
        for digits in range(3, 13):
            per_update = round(bound**k, digits)
            written = per_update if side is Side.OLD else round(1.0 - per_update, digits)
            decay = written if side is Side.OLD else 1.0 - written
            if 0.0 < decay < 1.0 and low <= decay ** (1.0 / k) <= high:
                text = float_literal(written)
                edits = [Edit.replace(target, cst.Float(text))]
                if partner is not None and not setting.editable:
                    # ``0.9 * e + 0.1 * p``: both literals, kept summing to one.
                    other = per_update if partner[1] is Side.OLD else 1.0 - per_update
                    edits.append(
                        Edit.replace(partner[0], cst.Float(float_literal(round(other, digits))))
                    )
                return Fix.unsafe(f"Set the {setting.weight.param} to {text}", *edits)
        return None
