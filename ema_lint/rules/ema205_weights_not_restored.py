"""EMA205: averaged weights swapped into the live model and never swapped back."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObjects
from ..analysis.objects.triggers import AVERAGING_EVIDENCE, Evidence, requiring
from ..analysis.syntax.vocabulary import NAMED_AVERAGE
from ..analysis.training.backups import (
    ReferenceBackup,
    ReferenceBackups,
    TensorBackup,
    TensorBackups,
)
from ..analysis.training.swaps import Swap, WeightSwaps
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule


class WeightsNotRestored(Rule):
    """
    ## What it finds
    ``ema.store(params)`` and ``ema.copy_to(params)`` (diffusers ``EMAModel``, torch-ema,
    CompVis ``LitEma``) that put the averaged weights into the live model for evaluation,
    inside the training loop (or a function it calls, or a Lightning hook after which
    training goes on), without an ``ema.restore(params)`` on every path back to training:

    - no ``restore`` of that object at all;
    - a ``restore`` that some path skips: a ``return``, ``continue`` or ``break`` between
      the swap and the restore, a restore only in an ``except`` handler, or under a
      condition the swap is not under.

    - a backup that is no backup: ``saved = model.state_dict()`` (or ``dict(...)``,
      ``.copy()`` or ``{k: v for k, v in ....items()}`` of it) before
      ``model.load_state_dict(<averaged weights>)``, with a later
      ``model.load_state_dict(saved)`` meant to put the live weights back;
    - the same with the tensors themselves: ``backup = [p.data for p in
      model.parameters()]`` (or ``{n: p for n, p in model.named_parameters()}``, or
      ``self.backup[n] = p.data`` / ``backup.append(p.detach())`` in a loop over them)
      before the averaged weights are copied into those tensors (``p.copy_(e)``,
      ``p.data.copy_(self.shadow[n])``, ``model.load_state_dict(...)``), then a copy back
      from the backup (``p.data.copy_(self.backup[n])``).

    Silent when the restore is in another function of the module (a swap in
    ``on_validation_start`` undone in ``on_validation_end``), under the same condition as
    the swap (``if args.use_ema:`` twice, as the diffusers examples do), in a ``finally``,
    for ``with ema.average_parameters():``, and for a ``copy_to`` without ``store`` (the
    one-way swap before saving the final model). Silent for backups that are copies
    (``p.data.clone()``, ``copy.deepcopy(model.state_dict())``), for the pointer swap
    (``self.backup[n] = p.data`` then ``p.data = self.shadow[n]``: rebinding ``.data``
    leaves the old tensor, still in the backup, untouched), and for a
    ``load_state_dict(..., assign=True)``, which replaces the tensors instead of writing
    into them.

    ## Why it hurts training
    After ``copy_to`` the live model holds the averaged weights. Without ``restore``,
    training continues from the average instead of from where the optimizer was: the
    optimizer's moments no longer match the weights, each evaluation silently resets the
    model to a lagged copy of itself, and the run behaves as if the learning rate had
    been cut. The loss curve jumps at every evaluation and the final model is worse.

    A backup by reference fails the same way, without a missing call to show it:
    ``state_dict()`` returns the model's own tensors, and ``load_state_dict`` copies the
    averaged weights *into those tensors*. The backup is overwritten by the load it was
    meant to survive, and ``load_state_dict(saved)`` then restores the averaged weights.

    ```python
    # Bad: `saved` shares its tensors with the model
    saved = model.state_dict()
    model.load_state_dict(ema.state_dict())
    validate(model)
    model.load_state_dict(saved)  # restores the averaged weights

    # Good: a copy survives the load
    saved = copy.deepcopy(model.state_dict())
    ```

    ## Example
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for epoch in range(epochs):
        for batch in loader:
            unet(batch).loss.backward()
            optimizer.step()
            ema_unet.step(unet.parameters())
        ema_unet.store(unet.parameters())
        ema_unet.copy_to(unet.parameters())
        log_validation(unet, epoch)
    ```

    ## Use instead
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for epoch in range(epochs):
        for batch in loader:
            unet(batch).loss.backward()
            optimizer.step()
            ema_unet.step(unet.parameters())
        ema_unet.store(unet.parameters())
        ema_unet.copy_to(unet.parameters())
        try:
            log_validation(unet, epoch)
        finally:
            ema_unet.restore(unet.parameters())
    ```

    ## Shapes
    Each shape real training code uses, reported and silent.

    ### An early exit between the swap and the restore
    A ``continue`` for the processes that do not validate, after the swap, skips the
    restore on those processes; before the swap, it skips both.
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for epoch in range(epochs):
        for batch in loader:
            unet(batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            ema_unet.step(unet.parameters())
        ema_unet.store(unet.parameters())
        ema_unet.copy_to(unet.parameters())
        if not accelerator.is_main_process:
            continue
        log_validation(unet, epoch)
        ema_unet.restore(unet.parameters())
    ```
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for epoch in range(epochs):
        for batch in loader:
            unet(batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            ema_unet.step(unet.parameters())
        if not accelerator.is_main_process:
            continue
        ema_unet.store(unet.parameters())
        ema_unet.copy_to(unet.parameters())
        log_validation(unet, epoch)
        ema_unet.restore(unet.parameters())
    ```

    ### The restore under another condition than the swap
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for step, batch in enumerate(loader):
        unet(batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema_unet.step(unet.parameters())
        if step % eval_every == 0:
            ema_unet.store(unet.parameters())
            ema_unet.copy_to(unet.parameters())
            log_validation(unet, step)
        if use_ema:
            ema_unet.restore(unet.parameters())
    ```
    ```python
    from diffusers.training_utils import EMAModel

    ema_unet = EMAModel(unet.parameters(), decay=0.9999)
    for step, batch in enumerate(loader):
        unet(batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        ema_unet.step(unet.parameters())
        if step % eval_every == 0:
            ema_unet.store(unet.parameters())
            ema_unet.copy_to(unet.parameters())
            log_validation(unet, step)
        if step % eval_every == 0:
            ema_unet.restore(unet.parameters())
    ```

    ### A Lightning hook that swaps
    A swap in ``on_validation_epoch_start`` is undone in ``on_validation_epoch_end``;
    without it the next training epoch starts from the averaged weights.
    ```python
    import lightning.pytorch as pl
    from diffusers.training_utils import EMAModel


    class Diffusion(pl.LightningModule):
        def __init__(self, unet):
            super().__init__()
            self.unet = unet
            self.ema = EMAModel(self.unet.parameters(), decay=0.9999)

        def training_step(self, batch, batch_idx):
            return self.unet(batch).loss

        def on_before_zero_grad(self, optimizer):
            self.ema.step(self.unet.parameters())

        def on_validation_epoch_start(self):
            self.ema.store(self.unet.parameters())
            self.ema.copy_to(self.unet.parameters())
    ```
    ```python
    import lightning.pytorch as pl
    from diffusers.training_utils import EMAModel


    class Diffusion(pl.LightningModule):
        def __init__(self, unet):
            super().__init__()
            self.unet = unet
            self.ema = EMAModel(self.unet.parameters(), decay=0.9999)

        def training_step(self, batch, batch_idx):
            return self.unet(batch).loss

        def on_before_zero_grad(self, optimizer):
            self.ema.step(self.unet.parameters())

        def on_validation_epoch_start(self):
            self.ema.store(self.unet.parameters())
            self.ema.copy_to(self.unet.parameters())

        def on_validation_epoch_end(self):
            self.ema.restore(self.unet.parameters())
    ```

    ### Live tensors kept by reference
    ``p.data`` is the parameter's own storage: ``copy_`` of the average into it also
    overwrites the backup, and the restore copies the average back.
    ```python
    import torch


    class EMA:
        def __init__(self, model, decay=0.999):
            self.model = model
            self.decay = decay
            self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}
            self.backup = {}

        @torch.no_grad()
        def update(self):
            for n, p in self.model.named_parameters():
                self.shadow[n].lerp_(p, 1 - self.decay)

        def apply_shadow(self):
            for n, p in self.model.named_parameters():
                self.backup[n] = p.data
                p.data.copy_(self.shadow[n])

        def restore(self):
            for n, p in self.model.named_parameters():
                p.data.copy_(self.backup[n])


    def train(model, loader, optimizer, evaluate, epochs):
        ema = EMA(model)
        for epoch in range(epochs):
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                ema.update()
            ema.apply_shadow()
            evaluate(model)
            ema.restore()
    ```
    ```python
    import torch


    class EMA:
        def __init__(self, model, decay=0.999):
            self.model = model
            self.decay = decay
            self.shadow = {n: p.detach().clone() for n, p in model.named_parameters()}
            self.backup = {}

        @torch.no_grad()
        def update(self):
            for n, p in self.model.named_parameters():
                self.shadow[n].lerp_(p, 1 - self.decay)

        def apply_shadow(self):
            for n, p in self.model.named_parameters():
                self.backup[n] = p.data.clone()
                p.data.copy_(self.shadow[n])

        def restore(self):
            for n, p in self.model.named_parameters():
                p.data.copy_(self.backup[n])


    def train(model, loader, optimizer, evaluate, epochs):
        ema = EMA(model)
        for epoch in range(epochs):
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                ema.update()
            ema.apply_shadow()
            evaluate(model)
            ema.restore()
    ```

    ## Fix
    Safe: the statements after ``copy_to`` in its block (the evaluation) go into
    ``try:`` with ``finally: ema.restore(<the parameters given to store>)``; when the swap
    sits at the end of an ``if`` block (``if args.use_ema:``), the statements after that
    block are wrapped and the restore keeps the same condition. For torch-ema, whose
    ``average_parameters()`` context manager does the store, copy and restore itself,
    ``store`` + ``copy_to`` become ``with ema.average_parameters(<parameters>):`` around
    the same statements. A restore that a ``return``/``continue``/``break`` skips is moved
    into the ``finally`` of a ``try`` around the statements between the swap and it. No
    fix when there is nothing after the swap to wrap. A backup by reference becomes a copy:
    ``saved = copy.deepcopy(model.state_dict())`` (and ``import copy``); a backup of the
    tensors by reference keeps copies: ``p.data`` becomes ``p.data.clone()``, ``p``
    ``p.detach().clone()``.
    """

    code = "EMA205"
    fix_scope = FixScope.MOVES  # its fix moves, wraps or inserts statements
    name = "ema-weights-not-restored"
    summary = "Averaged weights swapped into the live model without restore()"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = (b"copy_to",)
    # A backup by reference: a load of weights AND averaged weights (an object or a name).
    trigger_groups = requiring(
        (b"load_state_dict", b"copy_"), AVERAGING_EVIDENCE | Evidence(triggers=(NAMED_AVERAGE,))
    )
    requires = (AveragingObjects, WeightSwaps, ReferenceBackups, TensorBackups)

    def finish(self) -> None:
        if self.ctx.nodes(cst.Assign):
            for backup in self.ctx.get(ReferenceBackups).backups:
                if backup.back_to_training:
                    self._report_backup(backup)
            for tensors in self.ctx.get(TensorBackups).backups:
                if tensors.back_to_training:
                    self._report_tensor_backup(tensors)
        if not self.ctx.get(AveragingObjects).objects:
            return
        for swap in self.ctx.get(WeightSwaps).swaps:
            if not swap.back_to_training:
                continue
            if swap.missing:
                self.report(
                    swap.copy_to,
                    f"{swap.obj.name} copies the averaged weights into the live model after "
                    "store(), but nothing calls restore(): training goes on from the averaged "
                    "weights instead of the optimizer's; restore them after evaluating "
                    "(try/finally)",
                    self._fix_missing(swap),
                )
            elif swap.skipped_by is not None:
                how = (
                    f"`{self.ctx.code(swap.skipped_by).strip()}`"
                    if not isinstance(swap.skipped_by, cst.Call)
                    else "a branch"
                )
                self.report(
                    swap.copy_to,
                    f"{swap.obj.name} copies the averaged weights into the live model, but "
                    f"{how} can skip the restore(): on that path training goes on from the "
                    "averaged weights; restore them in a finally block",
                    self._fix_skipped(swap),
                )

    def _report_backup(self, backup: ReferenceBackup) -> None:
        swap_in = self.ctx.code(backup.swap_in).strip()
        restore = self.ctx.code(backup.restores[0]).strip()
        self.report(
            backup.backup,
            f"`{backup.saved}` holds {backup.model}'s own tensors, not a copy: "
            f"`{swap_in}` overwrites them in place, so `{restore}` restores the averaged "
            "weights and training goes on from them; back up a copy "
            f"(copy.deepcopy({self.ctx.code(backup.state_dict).strip()}))",
            Fix.safe(
                "Back up a copy of the state dict",
                Edit.replace(backup.backup.value, _deepcopy(backup.backup.value)),
                Edit.add_import("copy"),
            ),
        )

    def _report_tensor_backup(self, backup: TensorBackup) -> None:
        swap_in = self.ctx.code(backup.swap_in).strip()
        restore = self.ctx.code(backup.restores[0]).strip()
        alias = self.ctx.code(backup.alias)
        clone = _clone(backup.alias)
        self.report(
            backup.statement,
            f"`{backup.saved}` holds {backup.model}'s own tensors (`{alias}`), not copies: "
            f"`{swap_in}` overwrites them in place, so `{restore}` puts the averaged weights "
            f"back and training goes on from them; back up copies (`{self.ctx.code(clone)}`)",
            Fix.safe("Back up copies of the tensors", Edit.replace(backup.alias, clone)),
        )

    # Fixes -------------------------------------------------------------------------------------
    def _statement(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        statement = self.ctx.index.statement(node)
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            return statement
        return None

    def _siblings(self, statement: cst.CSTNode) -> tuple[list[cst.BaseStatement], int] | None:
        block = self.ctx.index.parent(statement)
        if not isinstance(block, (cst.IndentedBlock, cst.Module)):
            return None
        body = list(block.body)
        position = next((i for i, s in enumerate(body) if s is statement), None)
        return (body, position) if position is not None else None

    def _restore_call(self, swap: Swap) -> cst.SimpleStatementLine:
        func = swap.store.func
        assert isinstance(func, cst.Attribute)
        args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in swap.store.args]
        if args:
            args = [
                *(
                    a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                    for a in args[:-1]
                ),
                args[-1],
            ]
        call = cst.Call(cst.Attribute(func.value, cst.Name("restore")), args=args)
        return cst.SimpleStatementLine([cst.Expr(call)])

    def _try(self, region: list[cst.BaseStatement], final: list[cst.BaseStatement]) -> cst.Try:
        first, *rest = region
        return cst.Try(
            body=cst.IndentedBlock([first.with_changes(leading_lines=[]), *rest]),
            finalbody=cst.Finally(body=cst.IndentedBlock(final)),
            leading_lines=first.leading_lines,
        )

    def _wrap(self, region: list[cst.BaseStatement], wrapper: cst.BaseCompoundStatement) -> Fix:
        edits = [
            Edit.replace(region[0], wrapper),
            *(Edit.remove(s, moved=True) for s in region[1:]),
        ]
        return Fix.safe("Restore the live weights after evaluating", *edits)

    def _fix_missing(self, swap: Swap) -> Fix | None:
        copy_line = self._statement(swap.copy_to)
        if copy_line is None:
            return None
        found = self._siblings(copy_line)
        if found is None:
            return None
        body, position = found
        region = body[position + 1 :]
        conditions: list[cst.BaseExpression] = []
        current: cst.CSTNode = copy_line
        while not region:
            # The swap ends an ``if`` block: wrap what follows the block, same condition.
            block = self.ctx.index.parent(current)
            owner = self.ctx.index.parent(block) if block is not None else None
            if not isinstance(owner, cst.If) or owner.orelse is not None:
                return None
            conditions.append(owner.test)
            found = self._siblings(owner)
            if found is None:
                return None
            body, position = found
            region = body[position + 1 :]
            current = owner
        if any(isinstance(s, (cst.FunctionDef, cst.ClassDef)) for s in region):
            return None
        restore: cst.BaseStatement = self._restore_call(swap)
        for test in conditions:
            restore = cst.If(test=test, body=cst.IndentedBlock([restore]))
        context = self._context_manager(swap, copy_line, region, conditions)
        if context is not None:
            return context
        return self._wrap(region, self._try(region, [restore]))

    def _context_manager(
        self,
        swap: Swap,
        copy_line: cst.SimpleStatementLine,
        region: list[cst.BaseStatement],
        conditions: list[cst.BaseExpression],
    ) -> Fix | None:
        """torch-ema: ``with ema.average_parameters(params):`` replaces store + copy_to."""
        spec = swap.obj.spec
        if conditions or spec is None or "average_parameters" not in spec.apply_methods:
            return None
        store_line = self._statement(swap.store)
        found = self._siblings(copy_line)
        if store_line is None or found is None:
            return None
        body, position = found
        if position == 0 or body[position - 1] is not store_line:
            return None
        code = self.ctx.code
        if [code(a.value) for a in swap.store.args] != [code(a.value) for a in swap.copy_to.args]:
            return None
        func = swap.store.func
        assert isinstance(func, cst.Attribute)
        args = [a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in swap.store.args][:1]
        manager = cst.Call(cst.Attribute(func.value, cst.Name("average_parameters")), args=args)
        first, *rest = region
        # The comments of the two lines the context manager replaces stay above it.
        comments = [line for line in copy_line.leading_lines if line.comment is not None]
        for line in (store_line, copy_line):
            if line.trailing_whitespace.comment is not None:
                comments.append(cst.EmptyLine(comment=line.trailing_whitespace.comment))
        block = cst.With(
            items=[cst.WithItem(manager)],
            body=cst.IndentedBlock([first.with_changes(leading_lines=[]), *rest]),
            leading_lines=[*store_line.leading_lines, *comments],
        )
        edits = [
            Edit.replace(store_line, block),
            Edit.remove(copy_line),
            *(Edit.remove(s, moved=True) for s in region),
        ]
        return Fix.safe("Evaluate inside the library's average_parameters() context", *edits)

    def _fix_skipped(self, swap: Swap) -> Fix | None:
        if not swap.restores or isinstance(swap.skipped_by, cst.Call):
            return None
        copy_line = self._statement(swap.copy_to)
        restore_line = self._statement(swap.restores[0])
        if copy_line is None or restore_line is None:
            return None
        found = self._siblings(copy_line)
        if found is None:
            return None
        body, position = found
        end = next((i for i, s in enumerate(body) if s is restore_line), None)
        if end is None or end <= position + 1:
            return None
        region = body[position + 1 : end]
        final = [restore_line.with_changes(leading_lines=[])]
        try_node = self._try(region, final)
        edits = [
            Edit.replace(region[0], try_node),
            *(Edit.remove(s, moved=True) for s in region[1:]),
        ]
        edits.append(Edit.remove(restore_line))
        return Fix.safe("Restore the live weights in a finally block", *edits)


def _deepcopy(value: cst.BaseExpression) -> cst.Call:
    """``copy.deepcopy(value)``, keeping the value's own parentheses inside the call."""
    return cst.Call(cst.Attribute(cst.Name("copy"), cst.Name("deepcopy")), [cst.Arg(value)])


def _clone(alias: cst.BaseExpression) -> cst.Call:
    """``p.data`` -> ``p.data.clone()``, ``p`` -> ``p.detach().clone()``: a copy of the
    tensor that the in-place load cannot overwrite."""
    if isinstance(alias, cst.Name):
        alias = cst.Call(cst.Attribute(alias, cst.Name("detach")))
    return cst.Call(cst.Attribute(alias, cst.Name("clone")))
