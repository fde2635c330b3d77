"""EMA305: an averaging loop that skips entries by name or kind (biases, norms never averaged)."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObject, AveragingObjects
from ..analysis.objects.filters import FilteredUpdates
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import InPlaceUpdates
from ..analysis.objects.whole_uses import WholeUses
from ..rule import Rule

_WHAT = {
    "name": "skipped entries (by name)",
    "kind": "skipped entries (by shape: biases and norm weights when it keeps matrices)",
}


class UpdateSkipsEntries(Rule):
    """
    ## What it finds
    A hand-written averaging update inside a loop over the weights that only runs for some
    of them: under a condition on the entry's name (``if "weight" in name``,
    ``if "bn" not in name``, ``name.startswith("backbone")``) or kind (``if p.ndim > 1``,
    ``if p.dim() > 1``, ``len(p.shape) > 1``), or after an ``if <condition>: continue``,
    while nothing else writes the skipped entries of the averaged copy and the module shows
    the copy used whole: run as a model, put in ``eval()`` (also at its creation:
    ``deepcopy(model).eval()``), handed to another function, saved (``state_dict()``,
    ``save_pretrained``) or returned by the function that trains it.

    ## Why it hurts training
    The averaged copy is evaluated and saved whole, but the skipped entries are never
    updated: they keep the values they had when the copy was made, the model's
    initialisation. Biases at zero and norm scales at one, under averaged matrices, give a
    model that scores far below the live one, and nothing fails.

    Not reported: a filter on ``requires_grad`` (frozen weights do not change, so the
    copy's value stays right), on the dtype (integer counters), on
    ``num_batches_tracked``; skipped entries written elsewhere (an ``else`` branch
    that copies them, a ``copy_`` before the ``continue``, another loop that ``copy_``s
    them, a ``load_state_dict`` of the copy in the same function); a filter the code makes
    an option (``if self.skip_norms and "bn" in name: continue``); a copy the module
    never shows used whole (a helper nobody here calls: its caller may handle the rest);
    and a copy made in ``eval()`` mode of which the module only uses a part (``ema[0]``
    saved, ``ema.encoder`` evaluated): the ``eval()`` at its creation alone does not make
    it used whole.

    ## Example
    ```python
    import copy

    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay=0.999):
        for (name, e), p in zip(ema_model.named_parameters(), model.parameters()):
            if "weight" in name:
                e.mul_(decay).add_(p, alpha=1 - decay)


    def train(model, loader, optimizer):
        ema_model = copy.deepcopy(model)
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            update_ema(ema_model, model)
        return ema_model
    ```

    ## Use instead
    ```python
    import copy

    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay=0.999):
        for (name, e), p in zip(ema_model.named_parameters(), model.parameters()):
            if "weight" in name:
                e.mul_(decay).add_(p, alpha=1 - decay)
            else:
                e.copy_(p)


    def train(model, loader, optimizer):
        ema_model = copy.deepcopy(model)
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            update_ema(ema_model, model)
        return ema_model
    ```

    ## Fix
    None: whether the skipped entries should be averaged or copied is a choice of the code.
    """

    code = "EMA305"
    name = "ema-update-skips-entries"
    summary = "Averaging loop skips weights by name or kind: they stay at their initial values"
    trigger_groups = UPDATE_EVIDENCE.groups
    triggers = UPDATE_EVIDENCE.triggers
    requires = (InPlaceUpdates, FilteredUpdates, AveragingObjects, WholeUses)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        for found in self.ctx.get(FilteredUpdates).filters:
            if found.kind not in _WHAT or found.copied or found.optional:
                continue
            obj = objects.of_update(found.update)
            if obj is None or not objects.averages_weights(found.update):
                continue
            use = self._used_whole(obj)
            if use is None:
                continue
            condition = self.ctx.code(found.test)
            where = "skips the entries where" if found.skips else "only runs where"
            self.report(
                found.test,
                f"the averaging update {where} {condition!r}: the {_WHAT[found.kind]} "
                f"are never written and keep the initial values of {obj.name} while it is "
                f"{use}; average or copy them too",
            )

    def _used_whole(self, obj: AveragingObject) -> str | None:
        """How the module uses the copy as a whole model, for the message; None if it does
        not show it (a helper nobody here calls: the skipped entries may be handled by the
        caller)."""
        whole_uses = self.ctx.get(WholeUses)
        if obj.module_copy and self._made_in_eval_mode(obj) and not whole_uses.parts_only(obj):
            return "made for evaluation (eval() at its creation)"
        use = whole_uses.first(obj, returned=True)
        if use is None:
            return None
        return {
            "called": "run as a model",
            "eval": "put in eval mode to be evaluated",
            "passed": "handed on as a model",
            "saved": "saved whole",
            "returned": "returned as the trained average",
        }.get(use.what, "used as a model")

    def _made_in_eval_mode(self, obj: AveragingObject) -> bool:
        node = obj.creation
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            if node.func.attr.value == "eval" and not node.args:
                return True
            node = node.func.value
        return False
