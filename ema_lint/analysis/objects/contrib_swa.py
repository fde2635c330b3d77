"""torchcontrib's SWA optimizer: an average kept in the optimizer and swapped into the model.

``opt = torchcontrib.optim.SWA(base_opt, swa_start=10, swa_freq=5, swa_lr=0.05)`` keeps the
running average of the weights in the optimizer's state; ``opt.swap_swa_sgd()`` exchanges it
with the model's own weights (once before evaluating or saving the average, once after to
go on training). Buffers are not averaged: after a swap the model's BatchNorm statistics
are those of the last SGD weights, so ``opt.bn_update(loader, model)`` (a static method,
also spelled ``SWA.bn_update``) must recompute them before the swapped-in average is used.

Facts only: the optimizers, their swaps and the recalibrations of the module; EMA401
judges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ema_lint.analysis.objects.api_calls import BoundCalls
from ema_lint.analysis.objects.apis import Role
from ema_lint.analysis.objects.recalibration import LocalBnUpdates
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable

SWA_OPTIMIZERS = frozenset({"torchcontrib.optim.SWA", "torchcontrib.optim.swa.SWA"})


@dataclass(eq=False)
class ContribSwa:
    """One ``torchcontrib.optim.SWA`` optimizer of the module."""

    creation: cst.Call
    names: list[str] = field(default_factory=list)  # what it is bound to (``optimizer``)
    swaps: list[cst.Call] = field(default_factory=list)  # its ``swap_swa_sgd()`` calls


class ContribSwaOptimizers:
    """The module's torchcontrib SWA optimizers and its BatchNorm recalibrations."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.optimizers: list[ContribSwa] = []
        # ``opt.bn_update(...)``, ``SWA.bn_update(...)``, ``update_bn(...)``, the module's or
        # the project's own recalibration helpers.
        self.recalibrations: list[cst.Call] = []
        imports = ctx.get(ImportTable)
        by_name: dict[str, ContribSwa] = {}
        for call in ctx.nodes(cst.Call):
            if imports.resolve(call.func, SWA_OPTIMIZERS) is None:
                continue
            optimizer = ContribSwa(call)
            parent = ctx.index.parent(call)
            if isinstance(parent, cst.Assign):
                optimizer.names = [ctx.code(t.target).strip() for t in parent.targets]
            self.optimizers.append(optimizer)
            by_name.update(dict.fromkeys(optimizer.names, optimizer))
        if not self.optimizers:
            return
        for call in ctx.nodes(cst.Call):
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            owner = ctx.code(func.value).strip()
            if func.attr.value == "swap_swa_sgd" and owner in by_name:
                by_name[owner].swaps.append(call)
            elif func.attr.value == "bn_update" and (
                owner in by_name or imports.resolve(func.value, SWA_OPTIMIZERS) is not None
            ):
                self.recalibrations.append(call)
        self.recalibrations.extend(
            b.call
            for b in ctx.get(BoundCalls).calls
            if b.spec.role is Role.BN_UPDATE and not b.virtual
        )
        self.recalibrations.extend(b.call for b in ctx.get(LocalBnUpdates).calls)

    @classmethod
    def build(cls, ctx: FileContext) -> ContribSwaOptimizers:
        return cls(ctx)

    def unrecalibrated(self) -> list[ContribSwa]:
        """Optimizers whose average is swapped into the model while the module recomputes
        no BatchNorm statistics anywhere."""
        if self.recalibrations:
            return []
        return [o for o in self.optimizers if o.swaps]
