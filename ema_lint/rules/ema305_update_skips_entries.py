"""EMA305: an averaging loop that skips entries by name or kind (biases, norms never averaged)."""

from __future__ import annotations

from ..analysis.objects.filters import FilteredUpdates
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import InPlaceUpdates
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
    while nothing else writes the skipped entries of the averaged copy.

    ## Why it hurts training
    The averaged copy is evaluated and saved whole, but the skipped entries are never
    updated: they keep the values they had when the copy was made, the model's
    initialisation. Biases at zero and norm scales at one, under averaged matrices, give a
    model that scores far below the live one, and nothing fails.

    Not reported: a filter on ``requires_grad`` (frozen weights do not change, so the
    copy's value stays right), on the dtype (integer counters), on
    ``num_batches_tracked``; and skipped entries written elsewhere (an ``else`` branch
    that copies them, another loop that ``copy_``s them, a ``load_state_dict`` of the
    copy in the same function).

    ## Example
    ```python
    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay=0.999):
        for (name, e), p in zip(ema_model.named_parameters(), model.parameters()):
            if "weight" in name:
                e.mul_(decay).add_(p, alpha=1 - decay)
    ```

    ## Use instead
    ```python
    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay=0.999):
        for (name, e), p in zip(ema_model.named_parameters(), model.parameters()):
            if "weight" in name:
                e.mul_(decay).add_(p, alpha=1 - decay)
            else:
                e.copy_(p)
    ```

    ## Fix
    None: whether the skipped entries should be averaged or copied is a choice of the code.
    """

    code = "EMA305"
    name = "ema-update-skips-entries"
    summary = "Averaging loop skips weights by name or kind: they stay at their initial values"
    trigger_groups = UPDATE_EVIDENCE.groups
    triggers = UPDATE_EVIDENCE.triggers
    requires = (InPlaceUpdates, FilteredUpdates)

    def finish(self) -> None:
        for found in self.ctx.get(FilteredUpdates).filters:
            if found.kind not in _WHAT or found.copied:
                continue
            condition = self.ctx.code(found.test)
            where = "skips the entries where" if found.skips else "only runs where"
            self.report(
                found.test,
                f"the averaging update {where} {condition!r}: the {_WHAT[found.kind]} "
                "are never written and keep the averaged copy's initial values while it is "
                "used whole; average or copy them too",
            )
