"""EMA202: the average is updated on every micro-batch while the optimizer steps every N."""

from __future__ import annotations

import math

import libcst as cst

from ..analysis.objects.averaging import AveragingObject, AveragingObjects, Use
from ..analysis.objects.horizon import format_count, format_number, horizon
from ..analysis.objects.triggers import AVERAGING_EVIDENCE, requiring
from ..analysis.syntax.values import ValueResolver
from ..analysis.training.decays import DecaySettings
from ..analysis.training.framework import FrameworkHooks
from ..analysis.training.loops import (
    MicroBatchFinding,
    Placement,
    TrainingLoops,
    accumulation_steps,
)
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule
from ..statement_edits import move_after, wrap_in_if


def _short(value: float) -> str:
    """A decay rounded to two significant digits of its distance from 1."""
    if not 0.0 < value < 1.0:
        return format_number(value)
    digits = max(3, math.ceil(-math.log10(1.0 - value)) + 1)
    return format_number(round(value, digits))


class UpdateIgnoresAccumulation(Rule):
    """
    ## What it finds
    An update of an averaged copy (an EMA or SWA update call, a hand-written in-place
    update, or a call of a function of the module that does one) that runs more often
    than the optimizer steps, because gradients are accumulated over several
    micro-batches:

    - in a training loop whose ``optimizer.step()`` sits behind an accumulation guard
      (``if (i + 1) % accum_steps == 0:``, ``if took_step:``, a step helper such as
      ``self.optimizer_step()`` called under ``if ni - last_opt_step >= accumulate:``) while
      the update sits outside that guard;
    - before an early exit that skips the step on accumulating micro-batches
      (``if (i + 1) % k != 0: continue``, ``if not need_update: continue``, ``if ...:
      return`` in a step function);
    - under or after ``with accelerator.accumulate(model):`` without
      ``if accelerator.sync_gradients:`` around the update (the optimizer's ``step()`` is a
      no-op on the micro-batches that do not sync, the EMA update is not); likewise under
      Fabric's ``no_backward_sync`` or DDP's ``no_sync()``;
    - after a call that steps only on some micro-batches although there is no ``step`` at
      the call: timm's ``loss_scaler(loss, optimizer, update_grad=...)``, DeepSpeed's
      ``engine.step()`` with ``gradient_accumulation_steps``, mmengine's
      ``optim_wrapper.update_params(loss)`` with ``accumulative_counts``, or a function or
      method of the module (also called on an instance, ``stepper.step(i)``) whose step
      waits for an accumulation guard; and inside such a function, an update after its
      guarded step; a step helper of another module of the project (a ``NativeScaler``-like
      class whose ``__call__`` steps only ``if update_grad:``) called with the argument its
      step depends on, by keyword or position, set to anything but ``True``;
    - inside an inner loop over micro-batches that calls ``backward()`` but not the step;
    - at the framework level: a Lightning ``training_step`` / ``on_train_batch_end`` (of a
      LightningModule or a callback, also through the project's own base classes in this
      or other modules: a base class's hook updating the average a subclass sets, or a
      subclass's hook updating the one its base class set) that updates an average with no
      check that the optimizer stepped (an ``if`` or an early ``return`` on
      ``trainer.global_step`` or ``trainer.fit_loop._should_accumulate()``). The
      accumulation setting usually lives in another file or on the command line, so this
      is reported on its own, saying it is harmless only while ``accumulate_grad_batches``
      is 1; where the module's ``Trainer``, or one in a module of the project that imports
      the hook's class, sets ``accumulate_grad_batches > 1`` the message says so and cites
      it (and where the module sets 1, nothing is reported). A Keras optimizer with
      ``use_ema=True`` and ``gradient_accumulation_steps > 1`` (it also updates the average
      on the steps that only accumulate); an mmengine ``EMAHook`` in a config whose
      ``optim_wrapper`` has ``accumulative_counts > 1`` (the hook updates after every
      iteration).

    Silent where the update already runs once per optimizer step: inside the guard or the
    step helper (timm's ``need_update``, ultralytics' ``optimizer_step``, guided-diffusion's
    ``took_step``), behind ``if accelerator.sync_gradients:`` (the diffusers examples;
    ``optimizer.step()`` itself may stay outside it), after the early exit, under
    ``engine.is_gradient_accumulation_boundary()`` or ``optim_wrapper.should_update()``, in
    Lightning ``on_before_zero_grad`` or an ``optimizer_step`` override or behind a
    ``trainer.global_step`` check, when the step helper runs in both branches of the
    condition, and for averaging that hooks the optimizer step itself
    (Lightning ``WeightAveraging``/``EMAWeightAveraging``, NeMo's ``EMAOptimizer``,
    ema-pytorch's ``add_to_optimizer_post_step_hook``). An update under its own interval
    guard (``if step % ema_every == 0:``) is an interval the code chose and is not judged.

    ## Why it hurts training
    An EMA with decay D updated on every one of N micro-batches decays N times per
    optimizer step: its effective decay is D^N. With D = 0.999 and 8 accumulation steps
    that is 0.992, an average over about 125 optimizer steps instead of 1000, and the
    extra updates re-average weights that did not change. The averaged model is noisier
    than configured, and an SWA average weights the same point several times.

    ## Example
    ```python
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        ema_model.update_parameters(model)
    ```

    ## Use instead
    ```python
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            ema_model.update_parameters(model)
            optimizer.zero_grad()
    ```

    ## Shapes
    Each shape real training code uses, reported and silent.

    ### `accelerator.accumulate()`: the update after the block
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for batch in loader:
        with accelerator.accumulate(unet):
            accelerator.backward(unet(batch).loss)
            optimizer.step()
            optimizer.zero_grad()
        ema_unet.step(unet.parameters())
    ```
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for batch in loader:
        with accelerator.accumulate(unet):
            accelerator.backward(unet(batch).loss)
            optimizer.step()
            optimizer.zero_grad()
        if accelerator.sync_gradients:
            ema_unet.step(unet.parameters())
    ```

    ### `accelerator.accumulate()`: the update inside the block
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for batch in loader:
        with accelerator.accumulate(unet):
            accelerator.backward(unet(batch).loss)
            optimizer.step()
            optimizer.zero_grad()
            ema_unet.step(unet.parameters())
    ```
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for batch in loader:
        with accelerator.accumulate(unet):
            accelerator.backward(unet(batch).loss)
            optimizer.step()
            optimizer.zero_grad()
            if accelerator.sync_gradients:
                ema_unet.step(unet.parameters())
    ```

    ### An early exit: the update before it
    ```python
    from timm.utils import ModelEmaV3

    ema = ModelEmaV3(model, decay=0.9998)
    for i, batch in enumerate(loader):
        (model(batch).mean() / accum).backward()
        ema.update(model)
        if (i + 1) % accum != 0:
            continue
        optimizer.step()
        optimizer.zero_grad()
    ```
    ```python
    from timm.utils import ModelEmaV3

    ema = ModelEmaV3(model, decay=0.9998)
    for i, batch in enumerate(loader):
        (model(batch).mean() / accum).backward()
        if (i + 1) % accum != 0:
            continue
        optimizer.step()
        optimizer.zero_grad()
        ema.update(model)
    ```

    ### A step helper: timm's `loss_scaler(..., update_grad=...)`
    ```python
    from timm.utils import ModelEma

    model_ema = ModelEma(model, decay=0.9999)
    for it, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / update_freq
        loss_scaler(loss, optimizer, update_grad=(it + 1) % update_freq == 0)
        model_ema.update(model)
    ```
    ```python
    from timm.utils import ModelEma

    model_ema = ModelEma(model, decay=0.9999)
    for it, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / update_freq
        loss_scaler(loss, optimizer, update_grad=(it + 1) % update_freq == 0)
        if (it + 1) % update_freq == 0:
            optimizer.zero_grad()
            model_ema.update(model)
    ```

    ### A function called per micro-batch that steps under a guard
    ```python
    import copy

    ema = copy.deepcopy(model).requires_grad_(False)

    def run_iter(step, batch):
        model(batch).mean().backward()
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
        update_ema(ema, model, decay=0.9999)

    for step, batch in enumerate(loader):
        run_iter(step, batch)
    ```
    ```python
    import copy

    ema = copy.deepcopy(model).requires_grad_(False)

    def run_iter(step, batch):
        model(batch).mean().backward()
        if (step + 1) % accumulation_steps == 0:
            optimizer.step()
            update_ema(ema, model, decay=0.9999)
            optimizer.zero_grad()

    for step, batch in enumerate(loader):
        run_iter(step, batch)
    ```

    ### DeepSpeed's `engine.step()` with gradient accumulation
    ```python
    import deepspeed
    from timm.utils import ModelEmaV3

    config = {"train_batch_size": 64, "gradient_accumulation_steps": 8}
    model_engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config)
    ema = ModelEmaV3(model, decay=0.9998)
    for batch in loader:
        model_engine.backward(model_engine(batch).mean())
        model_engine.step()
        ema.update(model)
    ```
    ```python
    import deepspeed
    from timm.utils import ModelEmaV3

    config = {"train_batch_size": 64, "gradient_accumulation_steps": 8}
    model_engine, optimizer, _, _ = deepspeed.initialize(model=model, config=config)
    ema = ModelEmaV3(model, decay=0.9998)
    for batch in loader:
        model_engine.backward(model_engine(batch).mean())
        model_engine.step()
        if model_engine.is_gradient_accumulation_boundary():
            ema.update(model)
    ```

    ### Lightning: a per-batch hook
    ```python
    import lightning.pytorch as pl
    from timm.utils import ModelEmaV2

    class EmaCallback(pl.Callback):
        def __init__(self, net):
            self.ema = ModelEmaV2(net, decay=0.9998)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.ema.update(pl_module.net)
    ```
    ```python
    import lightning.pytorch as pl
    from timm.utils import ModelEmaV2

    class EmaCallback(pl.Callback):
        def __init__(self, net):
            self.ema = ModelEmaV2(net, decay=0.9998)

        def on_before_zero_grad(self, trainer, pl_module, optimizer):
            self.ema.update(pl_module.net)
    ```

    ### Lightning: a hook of a base class
    ```python
    import lightning.pytorch as pl
    from ema_pytorch import EMA

    class AveragedModule(pl.LightningModule):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            self.ema.update()

    class Denoiser(AveragedModule):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.ema = EMA(net, beta=0.9999)
    ```
    ```python
    import lightning.pytorch as pl
    from ema_pytorch import EMA

    class AveragedModule(pl.LightningModule):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            if self.trainer.fit_loop._should_accumulate():
                return
            self.ema.update()

    class Denoiser(AveragedModule):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.ema = EMA(net, beta=0.9999)
    ```

    ## Fix
    Safe. The update is moved into the block that holds the step, directly after the
    statement that steps (``optimizer.step()``, ``scaler.step(optimizer)``, the step
    helper), or out of the inner micro-batch loop to after the step; a condition or
    ``with`` block that holds only the update moves with it, comments move with it. Under
    ``accelerator.accumulate()`` the update is wrapped in place in
    ``if accelerator.sync_gradients:``. No fix when the step is gated inside a helper or by
    the call itself (``update_grad=``, DeepSpeed, mmengine), when the move would jump over code that
    reads the average or changes what the update reads, or would take the update out of a
    condition that also holds other code. The framework-level findings have no automatic
    fix (Lightning and Keras offer no switch for it; for mmengine set the ``EMAHook``'s
    ``interval`` to the accumulation count, an unsafe fix offered when the count is a
    literal).
    """

    code = "EMA202"
    fix_scope = FixScope.MOVES  # its fix moves, wraps or inserts statements
    name = "ema-update-ignores-accumulation"
    summary = "Average updated on every micro-batch while the optimizer steps every N"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    # Loop findings need a backward pass (or a step helper that runs it) in the module;
    # framework findings a Lightning hook or their accumulation setting. Either AND an
    # averaging object or update.
    triggers = ()
    trigger_groups = requiring(
        (
            b"backward(",
            b"scaler(",  # timm's loss_scaler(loss, optimizer, update_grad=...)
            b"update_params(",  # mmengine's optim_wrapper.update_params(loss)
            b"jax.grad(",  # JAX training steps (optax.MultiSteps accumulates)
            b"value_and_grad(",
            b"accumulate_grad_batches",
            # Lightning's per-batch hooks, reported without an accumulation setting
            b"training_step",
            b"on_train_batch_",
            b"on_before_backward",
            b"on_after_backward",
            b"gradient_accumulation_steps",
            b"accumulative_counts",
        ),
        AVERAGING_EVIDENCE,
    )
    requires = (AveragingObjects, TrainingLoops, FrameworkHooks, DecaySettings)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        if not objects.objects:
            return
        self._loops = self.ctx.get(TrainingLoops)
        self._placement = Placement(self._loops)
        seen: set[int] = set()
        keep = {id(u) for o in objects.objects for u in o.updates}
        for obj in objects.objects:
            if obj.use is Use.NOT_WEIGHTS:
                continue
            if self._loops.step_calls:
                for update in obj.updates:
                    for finding in self._loops.micro_batch_findings(update):
                        if id(finding.at) in seen:
                            continue
                        seen.add(id(finding.at))
                        self._report_loop(obj, finding, keep | {id(finding.at)})
            self._framework(obj, seen)

    # Training loops ------------------------------------------------------------------------
    def _report_loop(self, obj: AveragingObject, finding: MicroBatchFinding, keep) -> None:
        where = finding.where
        count = accumulation_steps(self.ctx, finding)
        inside = finding.node is not None and self.ctx.index.contains(where, finding.node)
        if finding.kind == "guard" and inside:
            assert isinstance(where, cst.If)
            how = (
                f"in the branch `if {self._test(where)}:` of the micro-batches that skip the "
                "optimizer step"
            )
        elif finding.kind == "guard":
            assert isinstance(where, cst.If)
            how = (
                f"outside the accumulation guard `if {self._test(where)}:` that holds the "
                "optimizer step"
            )
        elif finding.kind == "accumulate":
            assert isinstance(where, cst.With)
            how = self._accumulate_how(finding, where)
        elif finding.kind == "helper":
            helper = self.ctx.code(finding.step.func) if finding.step is not None else "helper"
            test = f"`if {self._test(where)}:`" if isinstance(where, cst.If) else "a condition"
            how = f"while `{helper}()` steps the optimizer only under {test}"
        elif finding.kind == "keyword":
            assert isinstance(where, cst.Arg)
            condition = (
                f"`{where.keyword.value}={self.ctx.code(where.value)}`"
                if where.keyword is not None
                else f"`{self.ctx.code(where.value)}` (the argument its step depends on)"
            )
            how = f"while the step helper steps the optimizer only when {condition}"
        elif finding.kind == "engine":
            how = (
                "after the DeepSpeed engine's `step()`, which steps the optimizer only at "
                "gradient-accumulation boundaries (`is_gradient_accumulation_boundary()`)"
            )
        elif finding.kind == "wrapper":
            how = (
                "after mmengine's `update_params()`, which steps the optimizer only every "
                "accumulative_counts iterations (`should_update()`)"
            )
        elif finding.kind == "multisteps":
            how = (
                "after the update of an `optax.MultiSteps` optimizer, which applies the "
                "accumulated update only every k calls (zeros on the others; "
                "`opt.has_updated(opt_state)` says which)"
            )
        else:
            how = "inside the micro-batch loop, while the optimizer steps after it"
        message = f"{obj.name} is updated on every micro-batch, {how}: {self._effect(obj, count)}"
        self.report(finding.at, message, self._fix(obj, finding, keep))

    def _accumulate_how(self, finding: MicroBatchFinding, block: cst.With) -> str:
        item = block.items[0].item
        context = self.ctx.code(item.func) if isinstance(item, cst.Call) else "accumulate"
        where = "under" if self.ctx.index.contains(block, finding.at) else "after"
        if context.endswith(".accumulate"):
            return f"{where} `{context}()` without `if accelerator.sync_gradients:`"
        return (
            f"{where} `{context}()`, whose micro-batches only accumulate gradients, without "
            "a check that the optimizer stepped"
        )

    def _test(self, guard: cst.If) -> str:
        return self.ctx.code(guard.test)

    def _effect(self, obj: AveragingObject, count: tuple[int, str] | None) -> str:
        decay = self._decay(obj)
        if count is None:
            return (
                "it moves several times per optimizer step, so its decay applies once per "
                "micro-batch and it averages over proportionally fewer optimizer steps than "
                "configured; update it once per optimizer step"
            )
        n, shown = count
        steps = f"every {n} micro-batches" + (f" ({shown})" if shown != str(n) else "")
        if decay is None or not 0.0 < decay < 1.0:
            return (
                f"the optimizer steps {steps}, so the average moves {n} times per step and "
                f"its decay is effectively raised to the power {n}; update it once per "
                "optimizer step"
            )
        effective = decay**n
        return (
            f"the optimizer steps {steps}, so the decay {format_number(decay)} applies {n} "
            f"times per step: an effective decay of {format_number(decay)}^{n} = "
            f"{_short(effective)}, an average over about "
            f"{format_count(horizon(effective))} optimizer steps instead of "
            f"{format_count(horizon(decay))}; update it once per optimizer step"
        )

    def _decay(self, obj: AveragingObject) -> float | None:
        if obj.weight_call is None:
            return None
        setting = self.ctx.get(DecaySettings).for_call(obj.weight_call.call)
        return None if setting is None else setting.decay

    def _fix(self, obj: AveragingObject, finding: MicroBatchFinding, keep) -> Fix | None:
        placement = self._placement
        loop = finding.scope if finding.scope is not None else finding.anchor.loop
        node = finding.at
        if finding.kind == "accumulate":
            block = finding.where
            assert isinstance(block, cst.With)
            accelerator = placement.accumulate_owner(block)
            inside = self.ctx.index.contains(block, node)
            moved = placement.movable(node, keep, within=block if inside else loop)
            if accelerator is None or moved is None:
                return None
            wrapped = wrap_in_if(moved, cst.Attribute(accelerator, cst.Name("sync_gradients")))
            return Fix.safe(
                "Update the average only when gradients sync", Edit.replace(moved, wrapped)
            )
        if finding.kind != "loop":
            if finding.kind != "guard" or not self.ctx.index.contains(loop, finding.where):
                # gated inside a helper or by the call itself: no place to move to
                return None
            step = finding.step
            moved = placement.movable(node, keep, within=loop)
        else:
            inner = finding.where
            steps = [
                s for s in self._loops.step_anchors(loop) if not self.ctx.index.contains(inner, s)
            ]
            step = steps[0] if steps else None
            moved = placement.movable(node, keep, leave=(inner,), within=loop)
        if step is None or moved is None:
            return None
        target = placement.after_step(step, loop)
        if target is None or self.ctx.index.contains(moved, target):
            return None
        if placement.conflicts(moved, target, obj.names):
            return None
        return move_after(moved, target, "Move the update next to the optimizer step")

    # Frameworks ----------------------------------------------------------------------------
    def _framework(self, obj: AveragingObject, seen: set[int]) -> None:
        hooks = self.ctx.get(FrameworkHooks)
        for update, hook, setting in hooks.per_batch_updates(obj):
            anchor = hooks.anchor_in(update, hook)
            if id(anchor) in seen:
                continue
            seen.add(id(anchor))
            advice = (
                "update it in `on_before_zero_grad` or an `optimizer_step` override, check "
                "that `trainer.global_step` changed, or use Lightning's EMAWeightAveraging "
                "callback"
            )
            if setting is None:
                self.report(
                    anchor,
                    f"{obj.name} is updated in Lightning's `{hook.name.value}`, which runs on "
                    "every batch, not on every optimizer step: this is harmless only while "
                    "the Trainer's accumulate_grad_batches is 1; with N > 1 the average moves "
                    f"N times per optimizer step (its decay is effectively raised to the power "
                    f"N); {advice}",
                )
                continue
            count = self._count_text(setting)
            self.report(
                anchor,
                f"{obj.name} is updated in Lightning's `{hook.name.value}`, which runs on every "
                f"batch, while the Trainer accumulates gradients over {count} "
                "(accumulate_grad_batches): the average moves several times per optimizer "
                f"step (its decay is effectively raised to that power); {advice}",
            )
        for bound, setting in hooks.optimizer_ema_accumulation(obj):
            if id(bound.call) in seen:
                continue
            seen.add(id(bound.call))
            self.report(
                bound.call,
                f"{obj.name} keeps an EMA of the weights (use_ema=True) with "
                f"gradient_accumulation_steps={self._count_text(setting)}: Keras also updates "
                "the average on the steps that only accumulate, so the EMA moves on every "
                "micro-batch and its momentum is effectively raised to that power; keep the "
                "EMA outside the optimizer or do not accumulate",
            )
        for hook_call, setting, fix in hooks.mmengine_ema_accumulation(obj):
            if id(hook_call) in seen:
                continue
            seen.add(id(hook_call))
            self.report(
                hook_call,
                "EMAHook updates the average after every iteration, while the optimizer wrapper "
                f"accumulates gradients over {self._count_text(setting)} iterations "
                "(accumulative_counts): the average moves several times per optimizer step; "
                "set the hook's interval to the accumulation count",
                fix,
            )

    def _count_text(self, setting: cst.BaseExpression | int) -> str:
        if isinstance(setting, int):  # set in another module of the project (cited)
            return str(setting)
        value = self.ctx.get(ValueResolver).resolve(setting)
        text = self.ctx.code(setting)
        if value is not None and value.number is not None:
            number = format_number(value.number)
            return number if number == text else f"{number} ({text})"
        return text
