"""EMA203: the average is updated before the optimizer step of the same iteration."""

from __future__ import annotations

import re

import libcst as cst

from ..analysis.objects.averaging import AveragingObject, AveragingObjects, Use
from ..analysis.objects.triggers import AVERAGING_EVIDENCE, requiring
from ..analysis.training.loops import BeforeStep, Placement, TrainingLoops
from ..diagnostics import Applicability, Fix, FixAvailability, FixScope
from ..rule import Rule
from ..statement_edits import move_after

# A comment that says the lag is wanted (d2go moved its EMA before the step on purpose).
_INTENT = re.compile(
    r"\b(lag|lags|lagging|previous (step|iteration|weights)|one step (behind|late)|"
    r"before (the )?(optimizer )?step|on purpose|intentional(ly)?|deliberate(ly)?|overlap)\b",
    re.IGNORECASE,
)
# Momentum-encoder updates that run inside the forward pass by design (MoCo).
_FORWARD = ("forward", "_momentum_update_key_encoder", "_momentum_update")


class UpdateBeforeStep(Rule):
    """
    ## What it finds
    An update of an evaluation EMA that runs, in the same iteration of the training loop,
    before the optimizer step: at the top of the loop body, between ``backward()`` and
    ``optimizer.step()``, or first thing in a step helper (``def optimizer_step(self):
    self.ema.update(self.model); self.optimizer.step()``), or in a step function that a
    framework calls without a loop in the module (a Lightning ``training_step`` with manual
    optimisation). The update and the step are followed across the functions and methods
    of the module, also methods called on instances (``updater.step()``). A step in the
    other branch of an ``if``/``else`` neither precedes nor follows the update, and a small
    loop over parameter pairs or EMA rates is part of the iteration around it. With several
    optimizers (a GAN's ``d_opt`` and ``g_opt``), where the module shows which models each
    was given, only the steps of the optimizer training the averaged model count.

    Silent for momentum-encoder updates inside ``forward()`` (MoCo updates its key encoder
    before computing the keys, by design), for teachers and target networks, where the
    update runs more often than the step (EMA202 reports that, and its fix also puts the
    update after the step), and where the code shows the lag is intended: a comment on or
    above the update that says so (``# update before the step to overlap with the
    backward pass``; a ``# noqa: EMA203`` says it too), or a last update after the loop that
    catches the final step.

    ## Why it hurts training
    Updated before the step, the average takes in the weights of the previous step: it
    lags one step behind, and the weights of the last step are never averaged. With a
    short horizon or a final learning-rate drop the averaged model misses the end of
    training; with a warmup that copies the weights on the first update it copies the
    initial, untrained weights.

    ## Example
    ```python
    from timm.utils import ModelEmaV3

    model_ema = ModelEmaV3(model, decay=0.9998)
    for x, y in loader:
        model_ema.update(model)
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    from timm.utils import ModelEmaV3

    model_ema = ModelEmaV3(model, decay=0.9998)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model_ema.update(model)
    ```

    ## Shapes
    Each shape real training code uses, reported and silent.

    ### Lightning manual optimisation with a generator/discriminator branch
    ```python
    import lightning.pytorch as pl
    from ema_pytorch import EMA

    class GAN(pl.LightningModule):
        def __init__(self, gen, disc):
            super().__init__()
            self.automatic_optimization = False
            self.gen, self.disc = gen, disc
            self.gen_ema = EMA(self.gen, beta=0.9999)

        def training_step(self, batch, batch_idx):
            opt_gen, opt_disc = self.optimizers()
            if self.global_step % 2:
                opt_disc.zero_grad()
                self.manual_backward(self.disc(batch).mean())
                opt_disc.step()
            else:
                self.gen_ema.update()
                opt_gen.zero_grad()
                self.manual_backward(self.gen(batch).mean())
                opt_gen.step()
    ```
    ```python
    import lightning.pytorch as pl
    from ema_pytorch import EMA

    class GAN(pl.LightningModule):
        def __init__(self, gen, disc):
            super().__init__()
            self.automatic_optimization = False
            self.gen, self.disc = gen, disc
            self.gen_ema = EMA(self.gen, beta=0.9999)

        def training_step(self, batch, batch_idx):
            opt_gen, opt_disc = self.optimizers()
            if self.global_step % 2:
                opt_disc.zero_grad()
                self.manual_backward(self.disc(batch).mean())
                opt_disc.step()
            else:
                opt_gen.zero_grad()
                self.manual_backward(self.gen(batch).mean())
                opt_gen.step()
                self.gen_ema.update()
    ```

    ### A small loop over parameter pairs before the step
    ```python
    import copy

    import torch

    ema_model = copy.deepcopy(model).requires_grad_(False)
    for batch in loader:
        loss = model(batch).mean()
        with torch.no_grad():
            for p_ema, p in zip(ema_model.parameters(), model.parameters()):
                p_ema.mul_(0.999).add_(p, alpha=0.001)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    ```
    ```python
    import copy

    import torch

    ema_model = copy.deepcopy(model).requires_grad_(False)
    for batch in loader:
        loss = model(batch).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for p_ema, p in zip(ema_model.parameters(), model.parameters()):
                p_ema.mul_(0.999).add_(p, alpha=0.001)
    ```

    ### The step in a method called on an instance
    ```python
    from timm.utils import ModelEmaV3

    class Updater:
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def step(self):
            self.optimizer.step()
            self.optimizer.zero_grad()

    updater = Updater(optimizer)
    ema = ModelEmaV3(model, decay=0.9998)
    for batch in loader:
        model(batch).mean().backward()
        ema.update(model)
        updater.step()
    ```
    ```python
    from timm.utils import ModelEmaV3

    class Updater:
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def step(self):
            self.optimizer.step()
            self.optimizer.zero_grad()

    updater = Updater(optimizer)
    ema = ModelEmaV3(model, decay=0.9998)
    for batch in loader:
        model(batch).mean().backward()
        updater.step()
        ema.update(model)
    ```

    ### Two optimizers: the step of the one that trains the averaged model
    ```python
    import copy

    import torch

    g_ema = copy.deepcopy(generator).eval().requires_grad_(False)
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4)
    d_opt = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
    for real in loader:
        d_opt.zero_grad()
        discriminator_loss(generator, discriminator, real).backward()
        d_opt.step()
        g_opt.zero_grad()
        generator_loss(generator, discriminator).backward()
        with torch.no_grad():
            for p_ema, p in zip(g_ema.parameters(), generator.parameters()):
                p_ema.lerp_(p, 0.001)
        g_opt.step()
    ```
    ```python
    import copy

    import torch

    g_ema = copy.deepcopy(generator).eval().requires_grad_(False)
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4)
    d_opt = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
    for real in loader:
        g_opt.zero_grad()
        generator_loss(generator, discriminator).backward()
        g_opt.step()
        with torch.no_grad():
            for p_ema, p in zip(g_ema.parameters(), generator.parameters()):
                p_ema.lerp_(p, 0.001)
        d_opt.zero_grad()
        discriminator_loss(generator, discriminator, real).backward()
        d_opt.step()
    ```

    ### Under `if accelerator.sync_gradients:`, above the step
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for batch in loader:
        with accelerator.accumulate(unet):
            accelerator.backward(unet(batch).loss)
            if accelerator.sync_gradients:
                ema_unet.step(unet.parameters())
            optimizer.step()
            optimizer.zero_grad()
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

    ### Update and step in different branches
    ```python
    from timm.utils import ModelEmaV3

    ema = ModelEmaV3(model, decay=0.9998)
    for i, batch in enumerate(loader):
        if i >= warmup:
            ema.update(model)
            model(batch).mean().backward()
            optimizer.step()
    ```
    ```python
    from timm.utils import ModelEmaV3

    ema = ModelEmaV3(model, decay=0.9998)
    for i, batch in enumerate(loader):
        if i < warmup:
            ema.update(model)
        else:
            model(batch).mean().backward()
            optimizer.step()
    ```

    ### A hand-written helper of the module, whatever its name
    A function moving one model's weights toward another's by a decay and its
    complement is an averaging update wherever it is called with a copy named as averaged
    (``accumulate(g_ema, generator, decay)``); the call that hands it zero, before the
    loop, is the initial copy. A helper called from several loops is judged at each call.
    ```python
    import torch


    def accumulate(avg, online, decay=0.999):
        online_params = dict(online.named_parameters())
        for name, p in avg.named_parameters():
            p.data.mul_(decay).add_(online_params[name].data, alpha=1 - decay)


    g_ema = make_generator().eval()
    accumulate(g_ema, generator, 0)
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-3)
    for z in loader:
        generator.zero_grad()
        generator_loss(generator(z)).backward()
        accumulate(g_ema, generator, 0.999)
        g_opt.step()
    ```
    ```python
    import torch


    def accumulate(avg, online, decay=0.999):
        online_params = dict(online.named_parameters())
        for name, p in avg.named_parameters():
            p.data.mul_(decay).add_(online_params[name].data, alpha=1 - decay)


    g_ema = make_generator().eval()
    accumulate(g_ema, generator, 0)
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-3)
    for z in loader:
        generator.zero_grad()
        generator_loss(generator(z)).backward()
        g_opt.step()
        accumulate(g_ema, generator, 0.999)
    ```

    ### A Lightning `optimizer_step` override
    The base method runs the closure (the training step and its backward pass), then the
    optimizer step: the update goes after ``super().optimizer_step(...)``.
    ```python
    import lightning.pytorch as pl
    import torch
    from timm.utils import ModelEmaV3


    class WithOverride(pl.LightningModule):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.ema = ModelEmaV3(self.net, decay=0.9998)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            self.ema.update(self.net)
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
    ```
    ```python
    import lightning.pytorch as pl
    import torch
    from timm.utils import ModelEmaV3


    class WithOverride(pl.LightningModule):
        def __init__(self, net):
            super().__init__()
            self.net = net
            self.ema = ModelEmaV3(self.net, decay=0.9998)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
            self.ema.update(self.net)
    ```

    ## Fix
    Safe: the update is moved to directly after the statement that steps the optimizer
    (inside the same accumulation guard or condition as the step), keeping its comments; a
    condition or ``with`` block that holds only the update moves with it. No fix when the
    move would jump over code that reads the average or assigns what the update reads, or
    would take the update out of a condition that also holds other code.
    """

    code = "EMA203"
    fix_scope = FixScope.MOVES  # its fix moves, wraps or inserts statements
    name = "ema-update-before-step"
    summary = "Average updated before the optimizer step of the same iteration"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = ()
    # a training loop needs a backward pass, AND an averaging object or update
    # (or a call that runs it: timm's loss_scaler, mmengine's update_params, JAX's grad)
    trigger_groups = requiring(
        (b"backward(", b"scaler(", b"update_params(", b"jax.grad(", b"value_and_grad("),
        AVERAGING_EVIDENCE,
    )
    requires = (AveragingObjects, TrainingLoops)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        if not objects.objects:
            return
        loops = self.ctx.get(TrainingLoops)
        if not loops.step_calls:
            return
        placement = Placement(loops)
        keep = {id(u) for o in objects.objects for u in o.updates}
        seen: set[int] = set()
        for obj in objects.objects:
            if obj.use is not Use.EVAL:
                continue
            for update in obj.updates:
                if self._in_forward(update, loops):
                    continue
                if loops.runs_per_micro_batch(update) is not None:
                    continue  # EMA202's finding
                for found in placement.before_steps(update):
                    if id(found.node) in seen:
                        continue
                    if self._exclusive(update, found.step):
                        continue  # ``if amp: scaler step; update / else: step; update``
                    seen.add(id(found.node))
                    if self._intended(obj, update, found, loops):
                        continue
                    self.report(
                        found.node,
                        f"{obj.name} is updated before the optimizer step of the same "
                        f"iteration (`{self.ctx.code(found.step)}`): it averages the previous "
                        "step's weights, so it lags one step behind and the last step is never "
                        "averaged; update it after the step",
                        self._fix(obj, found, placement, keep | {id(found.node)}),
                    )

    def _exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """``a`` and ``b`` sit in different branches of one ``if``: never in one iteration."""
        index = self.ctx.index
        for ancestor in index.ancestors(a):
            if isinstance(ancestor, cst.If) and ancestor.orelse is not None:
                body, orelse = ancestor.body, ancestor.orelse
                a_body, b_body = index.contains(body, a), index.contains(body, b)
                a_else, b_else = index.contains(orelse, a), index.contains(orelse, b)
                if (a_body and b_else) or (a_else and b_body):
                    return True
        return False

    def _in_forward(self, node: cst.CSTNode, loops: TrainingLoops) -> bool:
        fn = loops.function_of(node)
        return fn is not None and fn.name.value in _FORWARD

    def _intended(
        self, obj: AveragingObject, update: cst.CSTNode, found: BeforeStep, loops: TrainingLoops
    ) -> bool:
        index = self.ctx.index
        for node in (update, found.node):
            for statement in (index.statement(node), *index.ancestors(node)):
                if isinstance(statement, (cst.FunctionDef, cst.Module)):
                    break
                if self._says_intent(statement):
                    return True
        # A final update after the loop catches the last step: the lag is known.
        loop = found.loop
        if loop is not None:
            for other in obj.updates:
                if (
                    index.is_before(loop, other)
                    and not index.contains(loop, other)
                    and loops.function_of(other) is loops.function_of(loop)
                ):
                    return True
        return False

    def _says_intent(self, statement: cst.CSTNode | None) -> bool:
        comments: list[str] = []
        leading = getattr(statement, "leading_lines", ())
        comments.extend(line.comment.value for line in leading if line.comment is not None)
        trailing = getattr(statement, "trailing_whitespace", None)
        if trailing is not None and trailing.comment is not None:
            comments.append(trailing.comment.value)
        return any(_INTENT.search(text) for text in comments)

    def _fix(
        self, obj: AveragingObject, found: BeforeStep, placement: Placement, keep: set[int]
    ) -> Fix | None:
        index = self.ctx.index
        target = placement.after_step(found.step, found.loop)
        if target is None:
            return None
        within: cst.CSTNode | None = found.loop if found.loop is not None else found.function
        # An update under the accumulation guard, before the step under the same guard,
        # moves within the guard: it leaves no condition.
        for ancestor in index.ancestors(found.node):
            if ancestor is within:
                break
            if isinstance(ancestor, (cst.BaseCompoundStatement, cst.Else)) and index.contains(
                ancestor, target
            ):
                within = ancestor
                break
        moved = placement.movable(found.node, keep, within=within)
        if moved is None or index.contains(moved, target):
            return None
        if placement.conflicts(moved, target, obj.names):
            return None
        return move_after(moved, target, "Move the update after the optimizer step")
