"""EMA204: the averaged model evaluated in train mode."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObjects
from ..analysis.objects.triggers import OBJECT_EVIDENCE
from ..analysis.training.evaluation import Evaluation, EvaluationSites
from ..analysis.training.modes import Mode, ModeTracker
from ..analysis.training.swaps import LOCAL_SWAP_METHODS, WeightSwaps
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule
from ..statement_edits import call_statement


class AveragedModelInTrainMode(Rule):
    """
    ## What it finds
    An EMA or SWA model that is evaluated (passed to an ``evaluate``/``validate`` function
    of the module, or to one that runs it under ``torch.no_grad()`` or over a validation
    loader; or called itself in such a place; or sampled anywhere: a call whose output is
    taken to the host as data, ``G_ema(z).cpu()`` / ``.numpy()`` / ``.item()`` for an
    image grid or a metric, and the sampling methods ``sample()``, ``generate()``,
    ``predict()``, ``infer()``, ``decode()`` of the copy or of its inner model,
    ``ema.ema_model.sample(...)``) while it is in train mode: no
    ``.eval()`` on it on the way from its creation, or from the last ``.train()`` that
    reached it, to the evaluation. The path is followed back through the statements before
    the evaluation, the previous iteration of the loops around it, and the call sites of
    the function it is in.

    - ``copy.deepcopy(model)``, ``AveragedModel``, ema-pytorch's ``EMA`` and mmengine's
      averaged models copy the online model, usually in train mode, and keep that mode;
      so do the copies EDM2's ``PowerFunctionEMA`` / ``TraditionalEMA`` hand out from
      ``get()`` (plain deepcopies of ``net``, which EDM2 trains in train mode): ``for
      ema_net, suffix in ema.get():`` then ``ema_net(x)`` under ``torch.no_grad()`` runs
      the average in train mode (EDM2 itself only pickles ``deepcopy(ema_net).eval()``),
      and so do those of a project class of that shape in another module (a list of
      ``copy.deepcopy(net)`` kept by ``__init__``, a method returning ``[(copy, suffix)
      for ... in zip(..., self.copies)]``; eval mode when the copies' chain says
      ``.eval()``);
    - timm ``ModelEma*``, ultralytics/YOLOX ``ModelEMA`` and EDM-style
      ``deepcopy(net).eval()`` copies are in eval mode at construction, unless ``.train()``
      reaches them later, for example through a parent module's ``.train()`` when the EMA
      is a registered child (``self.ema = ModelEmaV2(self.net)`` in a LightningModule:
      Lightning calls ``.train()`` on the module at the start of every training epoch, so an
      evaluation in ``on_train_epoch_end`` runs the EMA in train mode; Lightning's own
      validation hooks run in eval mode and are fine).

    Averaged weights swapped into the live model (``ema.store(...)`` +
    ``ema.copy_to(model.parameters())``, ``ema.copy_to(...)`` alone, ``ema.apply_shadow()``
    of a swap class of the module or of the project, ``with ema.average_parameters():``)
    are evaluated in the live
    model's mode. Many correct scripts put that model in eval mode in code written
    elsewhere, so this is reported only where the code itself put the model in train mode
    and nothing switches it: a ``model.train()`` (or a local function that calls it on the
    model) found on every path back from the evaluation, with no ``.eval()`` after it. A
    ``.train()`` under an ``if``, a model whose mode the code never sets, and Lightning's
    hooks stay silent.

    Silent for teachers used inside the training loss (mean teacher, DINO, BYOL: often in
    train mode on purpose), for ``trainer.validate(...)``, for evaluation functions that
    call ``.eval()`` on their argument themselves, for evaluation functions imported from
    elsewhere (most call ``model.eval()`` themselves, and their code is not in the file),
    and wherever the mode cannot be told (a function nothing in the module calls, while
    the copy's mode is switched elsewhere).

    ## Why it hurts training
    In train mode dropout stays on and BatchNorm normalizes with the statistics of each
    evaluation batch (and overwrites the averaged running statistics with them), so the
    averaged model's metrics come out worse than its weights are; the comparison with the
    online model, which is evaluated in eval mode, then says the EMA does not help.

    ## Example
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


    @torch.no_grad()
    def evaluate(net, loader):
        return sum((net(x).argmax(1) == y).sum().item() for x, y in loader)


    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    for epoch in range(epochs):
        train_one_epoch(model, ema_model, train_loader)
        model.eval()
        print(evaluate(model, val_loader))
        model.train()
        print(evaluate(ema_model, val_loader))
    ```

    ## Use instead
    ```python
    import torch
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


    @torch.no_grad()
    def evaluate(net, loader):
        return sum((net(x).argmax(1) == y).sum().item() for x, y in loader)


    ema_model = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    for epoch in range(epochs):
        train_one_epoch(model, ema_model, train_loader)
        model.eval()
        print(evaluate(model, val_loader))
        model.train()
        ema_model.eval()
        print(evaluate(ema_model, val_loader))
    ```

    ## Shapes
    Each shape real training code uses, reported and silent.

    ### Evaluated every k steps inside the training loop
    The evaluation under ``if step % eval_every == 0:`` runs in the same loop that trains;
    the copy made by ``deepcopy`` keeps the model's train mode until something calls
    ``.eval()`` on it.
    ```python
    import copy

    import torch


    @torch.no_grad()
    def evaluate(net, loader):
        return sum((net(x).argmax(1) == y).sum().item() for x, y in loader)


    ema_model = copy.deepcopy(model)
    for step, (x, y) in enumerate(train_loader):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.lerp_(p, 0.001)
        if step % eval_every == 0:
            print(evaluate(ema_model, val_loader))
    ```
    ```python
    import copy

    import torch


    @torch.no_grad()
    def evaluate(net, loader):
        return sum((net(x).argmax(1) == y).sum().item() for x, y in loader)


    ema_model = copy.deepcopy(model)
    for step, (x, y) in enumerate(train_loader):
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.lerp_(p, 0.001)
        if step % eval_every == 0:
            ema_model.eval()
            print(evaluate(ema_model, val_loader))
    ```

    ### An EMA kept by a Lightning callback
    Lightning runs validation hooks with the LightningModule and its registered children
    in eval mode; a callback's own copy is not among them and stays in the mode it was
    made in. A copy that is a child of the LightningModule is switched with it (silent).
    ```python
    import copy

    import pytorch_lightning as pl
    import torch


    class EmaCallback(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            self.ema = copy.deepcopy(pl_module.net)

        def on_before_zero_grad(self, trainer, pl_module, optimizer):
            with torch.no_grad():
                for e, p in zip(self.ema.parameters(), pl_module.net.parameters()):
                    e.lerp_(p, 0.001)

        def on_validation_epoch_end(self, trainer, pl_module):
            with torch.no_grad():
                out = self.ema(trainer.datamodule.sample)
            pl_module.log("ema_out", out.mean())
    ```
    ```python
    import copy

    import pytorch_lightning as pl
    import torch


    class EmaCallback(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            self.ema = copy.deepcopy(pl_module.net)

        def on_before_zero_grad(self, trainer, pl_module, optimizer):
            with torch.no_grad():
                for e, p in zip(self.ema.parameters(), pl_module.net.parameters()):
                    e.lerp_(p, 0.001)

        def on_validation_epoch_end(self, trainer, pl_module):
            self.ema.eval()
            with torch.no_grad():
                out = self.ema(trainer.datamodule.sample)
            pl_module.log("ema_out", out.mean())
    ```

    ### The copies EDM2's post-hoc EMA hands out
    ``PowerFunctionEMA.get()`` returns ``(copy, suffix)`` pairs; the copies are the
    deepcopies made from ``net`` at construction, in its mode. An ``ema_net.eval()`` in
    the loop over them sticks (``get()`` hands out the same copies each time); copying
    them into an eval-mode snapshot is not an evaluation.
    ```python
    import torch
    from training.phema import PowerFunctionEMA

    net.train()
    ema = PowerFunctionEMA(net=net, stds=[0.050, 0.100])
    for step, images in enumerate(loader):
        (net(images) - images).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(cur_nimg=step * 64, batch_size=64)
        if step % 1000 == 0:
            for ema_net, suffix in ema.get():
                with torch.no_grad():
                    print(suffix, ema_net(probe).square().mean().item())
    ```
    ```python
    import torch
    from training.phema import PowerFunctionEMA

    net.train()
    ema = PowerFunctionEMA(net=net, stds=[0.050, 0.100])
    for step, images in enumerate(loader):
        (net(images) - images).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        ema.update(cur_nimg=step * 64, batch_size=64)
        if step % 1000 == 0:
            for ema_net, suffix in ema.get():
                ema_net.eval()
                with torch.no_grad():
                    print(suffix, ema_net(probe).square().mean().item())
    ```

    ## Fix
    Safe: ``<name>.eval()`` is inserted, with the same indentation, directly before the
    statement that evaluates the copy, or before the ``with torch.no_grad():`` block (or
    the loop over the validation loader) that holds the evaluation, but inside the loop
    that binds the copy's name (``for ema_net, suffix in ema.get():``). When the copy reaches
    the evaluation as the parameter of a function of the module that every caller gives
    an averaged copy, the call goes at the top of that function instead. The copy's
    updates do not depend on its mode, so putting it in eval mode changes nothing else.

    No fix for swapped-in weights: the live model goes on training after the restore, so
    it needs ``model.eval()`` before the evaluation and ``model.train()`` after the
    restore, and where training resumes is for the author to say:

    ```python
    ema.store(model.parameters())
    ema.copy_to(model.parameters())
    model.eval()
    print(evaluate(model, val_loader))
    ema.restore(model.parameters())
    model.train()
    ```
    """

    code = "EMA204"
    fix_scope = FixScope.MOVES  # its fix moves, wraps or inserts statements
    name = "averaged-model-in-train-mode"
    summary = "Averaged model evaluated in train mode (dropout on, batch statistics)"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = OBJECT_EVIDENCE.triggers
    # Or a swap class of the module: ``restore`` AND a call of its swap method.
    trigger_groups = (
        *OBJECT_EVIDENCE.groups,
        ((b"restore",), tuple(f".{m}(".encode() for m in LOCAL_SWAP_METHODS)),
    )
    requires = (AveragingObjects, EvaluationSites, ModeTracker, WeightSwaps)

    def finish(self) -> None:
        if not self.ctx.get(AveragingObjects).objects:
            return
        sites = self.ctx.get(EvaluationSites)
        modes = self.ctx.get(ModeTracker)
        for evaluation in sites.swapped:
            mode, cause = modes.live_mode_at(evaluation.expr, evaluation.node)
            if mode is Mode.TRAIN and cause is not None:
                self.report(evaluation.node, self._swapped_message(evaluation, cause))
        reported: set[tuple[int, int]] = set()
        for evaluation in sites.evaluations:
            key = (id(evaluation.before), id(evaluation.obj))
            if key in reported:
                continue
            if modes.mode_at(evaluation.obj, evaluation.node) is not Mode.TRAIN:
                continue
            reported.add(key)
            self.report(evaluation.node, self._message(evaluation, modes), self._fix(evaluation))

    def _message(self, evaluation: Evaluation, modes: ModeTracker) -> str:
        obj = evaluation.obj
        shown = self.ctx.code(evaluation.expr)
        if modes.initial_mode(obj) is Mode.TRAIN:
            why = "it is a copy of the model in train mode and nothing switched it to eval"
        else:
            why = "a `.train()` on it, or on a module holding it, put it back in train mode"
        what = "evaluated" if evaluation.kind == "passed" else "run for evaluation"
        return (
            f"{shown} is {what} in train mode ({why}): dropout stays on and BatchNorm uses "
            "the statistics of each evaluation batch, so the averaged model scores worse "
            f"than its weights; call {shown}.eval() before evaluating it"
        )

    def _swapped_message(self, evaluation: Evaluation, cause: cst.Call) -> str:
        shown = self.ctx.code(evaluation.expr)
        swap = evaluation.swap
        assert swap is not None
        swapped = self.ctx.code(swap.call.func)
        direct = isinstance(cause.func, cst.Attribute) and cause.func.attr.value == "train"
        put = "put it there" if direct else "puts it there"
        return (
            f"{shown} holds the averaged weights (swapped in by {swapped}(...)) and is "
            f"evaluated in train mode ({self.ctx.code(cause)} {put} and nothing "
            "switches it to eval): dropout stays on and BatchNorm uses the statistics "
            f"of each evaluation batch, so the average scores worse than its weights; call "
            f"{shown}.eval() before evaluating it and {shown}.train() after the restore"
        )

    def _fix(self, evaluation: Evaluation) -> Fix | None:
        title = "Put the averaged model in eval mode before evaluating it"
        if evaluation.top_of is not None and evaluation.param is not None:
            body = evaluation.top_of.body
            if not isinstance(body, cst.IndentedBlock) or not body.body:
                return None
            statement = call_statement(cst.Name(evaluation.param), "eval")
            first = body.body[0]
            if _is_docstring(first):
                return Fix.safe(title, Edit.insert_after(first, [statement]))
            return Fix.safe(title, Edit.insert_before(first, [statement]))
        statement = call_statement(evaluation.expr, "eval")
        return Fix.safe(title, Edit.insert_before(evaluation.before, [statement]))


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )
