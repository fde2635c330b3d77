"""EMA304: a hand-made EMA copy averaged over parameters() only, with BatchNorm in the model."""

from __future__ import annotations

import re

import libcst as cst

from ..analysis.objects.averaging import (
    AveragingObject,
    AveragingObjects,
    Use,
)
from ..analysis.objects.norm_layers import NormLayers
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import InPlaceUpdate, InPlaceUpdates
from ..analysis.syntax.names import dotted_name
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule

_PARAMETER_METHODS = ("parameters", "named_parameters")
_BUFFER_METHODS = ("state_dict", "buffers", "named_buffers")
# Calls that recalibrate BatchNorm statistics (``torch.optim.swa_utils.update_bn``...).
_RECALIBRATE = re.compile(
    r"(update|recalibrat|calibrat|reset|recompute|refresh)\w*_?bn|bn_?\w*"
    r"(update|recalibrat|calibrat|stat)",
    re.IGNORECASE,
)
# Uses of the copy that evaluate, export or sample with it.
_USE_METHODS = {"eval", "forward", "state_dict", "predict", "generate", "sample", "save_pretrained"}


class IgnoresBuffers(Rule):
    """
    ## What it finds
    A hand-made averaged copy of a model (``copy.deepcopy(model)``) that is updated over
    ``parameters()`` / ``named_parameters()`` only, when the model has buffers that matter
    (a BatchNorm layer named in the module, or a torchvision/timm CNN built there), the copy
    is used for evaluation (called, put in ``eval()``, passed to an evaluation function or
    saved), and nothing else keeps its buffers current: no loop over ``buffers()`` /
    ``state_dict()`` of the copy, no ``load_state_dict`` into it, no BatchNorm recalibration
    (``update_bn``).

    Silent for models without BatchNorm (LayerNorm/GroupNorm transformers, diffusion UNets),
    for teachers and target networks (MoCo's key encoder does not use its BatchNorm
    statistics; mean-teacher models are run in train mode on purpose), for averages of
    ``state_dict()`` (which hold the buffers), and for dicts of parameter copies that are
    swapped into the live model for evaluation (the live model's buffers are current).

    ## Why it hurts training
    ``deepcopy(model)`` copies the BatchNorm running mean and variance as they were at the
    copy, usually before training. Averaging only the parameters leaves them there: the
    averaged model is evaluated with normalisation statistics of the initial weights, and
    its accuracy can be far below the live model's, which looks like "EMA does not help".

    ## Example
    ```python
    import copy

    import torch
    from torch import nn

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    ema = copy.deepcopy(model)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.999).add_(p, alpha=0.001)
    evaluate(ema)
    ```

    ## Use instead
    ```python
    import copy

    import torch
    from torch import nn

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    ema = copy.deepcopy(model)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.999).add_(p, alpha=0.001)
            for e, b in zip(ema.buffers(), model.buffers()):
                e.copy_(b)
    evaluate(ema)
    ```

    ## Fix
    Unsafe: a loop that copies the buffers from the live model
    (``for ema_buffer, buffer in zip(ema.buffers(), model.buffers()): ema_buffer.copy_(buffer)``)
    is added right after the parameter update, as ``AveragedModel`` does by default. It
    changes the statistics the averaged model is evaluated with (averaging the buffers, or
    recalibrating with ``update_bn``, are alternatives), so it is a judgment call. Offered
    when the update loop zips the two models' ``parameters()``.
    """

    code = "EMA304"
    name = "ema-ignores-buffers"
    summary = "Hand-made EMA copy averaged over parameters() only, leaving BatchNorm stats stale"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.UNSAFE
    triggers = UPDATE_EVIDENCE.triggers
    trigger_groups = UPDATE_EVIDENCE.groups
    requires = (InPlaceUpdates, AveragingObjects, NormLayers)

    def finish(self) -> None:
        self._project_classes()
        provider = self.ctx.get(InPlaceUpdates)
        candidates = [u for u in provider.updates if u.shadow_method in _PARAMETER_METHODS]
        if not candidates:
            return
        buffers = self.ctx.get(NormLayers)
        if not buffers.has_batchnorm:
            return
        objects = self.ctx.get(AveragingObjects)
        for update in candidates:
            obj = objects.of_update(update)
            if obj is None or not obj.module_copy or obj.use is not Use.EVAL:
                continue
            if not objects.averages_weights(update) or provider.discarded(update) is not None:
                continue
            if self._buffers_handled(obj, objects) or not self._evaluated(obj, objects):
                continue
            node = update.loop.iter if update.loop is not None else update.node
            self.report(node, self._message(obj, buffers), self._fix(update))

    def _project_classes(self) -> None:
        """An instance of the project's own EMA class that (its summary says) averages
        parameters() only, made here for a model with BatchNorm and evaluated here: the
        buffers are the importer's problem, since only it shows the model."""
        objects = self.ctx.get(AveragingObjects)
        made = [
            o
            for o in objects.objects
            if o.spec is not None
            and o.bound is not None
            and o.spec.buffers == "no"
            and o.spec.library.startswith("defined in ")
            and o.use is Use.EVAL
        ]
        if not made:
            return
        buffers = self.ctx.get(NormLayers)
        if not buffers.has_batchnorm:
            return
        for obj in made:
            if self._buffers_handled(obj, objects) or not self._evaluated(obj, objects):
                continue
            self.report(
                obj.creation,
                f"{obj.name} is a {obj.spec.short_name}, which averages parameters() only, "
                f"but the model has BatchNorm layers ({buffers.evidence()}): its running "
                "statistics stay those copied when it was made, so it is evaluated with "
                "normalisation statistics of the initial weights; average or copy the buffers "
                "in its update too (or recalibrate them with update_bn)",
            )

    # Judging -----------------------------------------------------------------------------------
    def _buffers_handled(self, obj: AveragingObject, objects: AveragingObjects) -> bool:
        if any(u.shadow_method in _BUFFER_METHODS for u in obj.inplace):
            return True
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in (
                "buffers",
                "named_buffers",
                "load_state_dict",
            ):
                if objects.for_expression(func.value) is obj:
                    return True
                continue
            name = dotted_name(func) or ""
            if _RECALIBRATE.search(name.rsplit(".", 1)[-1]) and any(
                objects.for_expression(a.value) is obj for a in call.args
            ):
                return True
        return False

    def _evaluated(self, obj: AveragingObject, objects: AveragingObjects) -> bool:
        """The copy is called, put in eval mode, saved, or handed to another function."""
        index = self.ctx.index
        helpers = {
            fn.name.value
            for u in obj.inplace
            if isinstance(fn := index.enclosing(u.node, cst.FunctionDef), cst.FunctionDef)
        }
        for call in self._calls_mentioning(objects).get(id(obj), []):
            if index.contains(obj.creation, call) or any(
                index.contains(u.loop or u.node, call) for u in obj.inplace
            ):
                continue
            func = call.func
            if isinstance(func, (cst.Name, cst.Attribute)) and objects.for_expression(func) is obj:
                return True
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in _USE_METHODS
                and objects.for_expression(func.value) is obj
            ):
                return True
            name = (dotted_name(func) or "").rsplit(".", 1)[-1]
            if name in helpers or name in ("deepcopy", "zip", "list"):
                continue
            if any(objects.for_expression(a.value) is obj for a in call.args):
                return True
        return False

    def _calls_mentioning(self, objects: AveragingObjects) -> dict[int, list[cst.Call]]:
        """Calls whose callee, receiver or an argument refers to an object, by object: the
        only calls ``_evaluated`` can accept, grouped in one pass over the module."""
        found: dict[int, list[cst.Call]] | None = getattr(self, "_mentioning", None)
        if found is None:
            found = self._mentioning = {}
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                refs = [objects.for_expression(a.value) for a in call.args]
                if isinstance(func, (cst.Name, cst.Attribute)):
                    refs.append(objects.for_expression(func))
                if isinstance(func, cst.Attribute):
                    refs.append(objects.for_expression(func.value))
                for key in dict.fromkeys(id(r) for r in refs if r is not None):
                    found.setdefault(key, []).append(call)
        return found

    def _message(self, obj: AveragingObject, buffers: NormLayers) -> str:
        name = obj.name
        return (
            f"{name} is averaged over parameters() only, but the model has BatchNorm layers "
            f"({buffers.evidence()}): {name}'s running statistics stay those copied when it "
            "was made, so it is evaluated with normalisation statistics of the initial "
            "weights; copy or average the buffers too (or recalibrate them with update_bn)"
        )

    # Fix ----------------------------------------------------------------------------------------
    def _fix(self, update: InPlaceUpdate) -> Fix | None:
        loop = update.loop
        if loop is None or not isinstance(loop.iter, cst.Call):
            return None
        iterable = loop.iter
        if dotted_name(iterable.func) != "zip":
            return None
        positional = [a for a in iterable.args if a.keyword is None and not a.star]
        if len(positional) != 2:
            return None
        receivers: list[str] = []
        for arg in positional:
            value = arg.value
            if not (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in _PARAMETER_METHODS
                and not value.args
            ):
                return None
            receivers.append(self.ctx.code(value.func.value))
        keywords = "".join(
            f", {self.ctx.code(a).strip().rstrip(',')}" for a in iterable.args if a.keyword
        )
        taken = self._names_in_scope(loop)
        shadow_var = _fresh("ema_buffer", taken)
        source_var = _fresh("buffer", taken | {shadow_var})
        text = (
            f"for {shadow_var}, {source_var} in zip({receivers[0]}.buffers(), "
            f"{receivers[1]}.buffers(){keywords}):\n"
            f"    {shadow_var}.copy_({source_var})\n"
        )
        statement = cst.parse_statement(text, config=self.ctx.module.config_for_parsing)
        return Fix.unsafe(
            "Copy the buffers after the parameter update", Edit.insert_after(loop, [statement])
        )

    def _names_in_scope(self, node: cst.CSTNode) -> set[str]:
        scope = self.ctx.index.enclosing(node, cst.FunctionDef) or self.ctx.module
        return {n.value for n in self.ctx.index.descendants(scope, cst.Name)}  # type: ignore[attr-defined]


def _fresh(base: str, taken: set[str]) -> str:
    if base not in taken:
        return base
    number = 2
    while f"{base}{number}" in taken:
        number += 1
    return f"{base}{number}"
