"""EMA304: an EMA copy averaged over parameters() only, with BatchNorm in the model."""

from __future__ import annotations

import re

import libcst as cst

from ..analysis.objects.api_calls import BoundCalls
from ..analysis.objects.apis import API_TABLE, Role
from ..analysis.objects.averaging import (
    AveragingObject,
    AveragingObjects,
    Use,
)
from ..analysis.objects.norm_layers import NormLayers
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import InPlaceUpdate, InPlaceUpdates
from ..analysis.objects.whole_uses import USE_METHODS, WholeUses
from ..analysis.syntax.names import ImportTable, dotted_name
from ..analysis.training.modes import Mode, ModeTracker
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


class IgnoresBuffers(Rule):
    """
    ## What it finds
    An averaged copy of a model whose update never brings the buffers along, when the model
    has buffers that matter (a BatchNorm layer named in the module, or a torchvision/timm
    CNN built there) and the copy is used with them: evaluated (called, put in ``eval()``,
    passed to an evaluation function or saved), or, for a teacher, run in eval mode. The
    shapes of such an update:

    - a hand-made copy (``copy.deepcopy(model)``) updated over ``parameters()`` /
      ``named_parameters()`` only, inline, in a helper of the module or in a class of it;
    - a helper of another module of the project (``update_ema(ema, model)`` from
      ``utils/ema.py``) that averages parameters only, given such a copy;
    - an instance of the project's own EMA class, or of its subclass of a library EMA
      (``class ParamEma(ModelEmaV2)`` overriding ``update``, in this module or another),
      that averages parameters only.

    Nothing else may keep the copy's buffers current: no loop over ``buffers()`` /
    ``state_dict()`` of the copy, no ``load_state_dict`` into it, no BatchNorm
    recalibration (``update_bn``).

    Silent for models without BatchNorm (LayerNorm/GroupNorm transformers, diffusion UNets),
    for teachers and target networks run in train mode (MoCo's key encoder and mean-teacher
    models normalise with each batch's statistics), for averages of ``state_dict()`` (which
    hold the buffers), and for dicts of parameter copies that are swapped into the live
    model for evaluation (the live model's buffers are current).

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
    when the update loop of this module zips the two models' ``parameters()``; an update in
    another module is reported where its copy is made or updated, without a fix.
    """

    code = "EMA304"
    name = "ema-ignores-buffers"
    # Objects whose buffers the module handles (see ``_handling``), once per file.
    _handled: set[int] | None = None
    summary = "EMA copy averaged over parameters() only, leaving BatchNorm stats stale"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.UNSAFE
    triggers = UPDATE_EVIDENCE.triggers
    trigger_groups = UPDATE_EVIDENCE.groups
    requires = (InPlaceUpdates, AveragingObjects, NormLayers, WholeUses, BoundCalls, ModeTracker)

    def finish(self) -> None:
        self._project_classes()
        self._project_helpers()
        self._library_subclasses()
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
            if obj is None or not obj.module_copy:
                continue
            if not objects.averages_weights(update) or provider.discarded(update) is not None:
                continue
            if self._buffers_handled(obj, objects):
                continue
            teacher = self._teacher_in_eval(obj)
            if teacher is None and (obj.use is not Use.EVAL or not self._evaluated(obj)):
                continue
            node = update.loop.iter if update.loop is not None else update.node
            self.report(node, self._message(obj, buffers, teacher), self._fix(update))

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
            and o.spec.in_project
            and o.spec.role is not Role.EMA_FUNCTION
            and o.use in (Use.EVAL, Use.TEACHER)
        ]
        if not made:
            return
        buffers = self.ctx.get(NormLayers)
        if not buffers.has_batchnorm:
            return
        for obj in made:
            if self._buffers_handled(obj, objects):
                continue
            teacher = self._teacher_in_eval(obj)
            if teacher is None and (obj.use is not Use.EVAL or not self._evaluated(obj)):
                continue
            assert obj.spec is not None
            self.report(
                obj.creation,
                f"{obj.name} is a {obj.spec.short_name}, which averages parameters() only, "
                f"but the model has BatchNorm layers ({buffers.evidence()}): its running "
                f"statistics stay those copied when it was made, so it is {self._used(teacher)} "
                "with normalisation statistics of the initial weights; average or copy the "
                "buffers in its update too (or recalibrate them with update_bn)",
            )

    def _project_helpers(self) -> None:
        """``update_ema(ema, model)`` where ``update_ema`` is a helper of another module
        that (its summary says) averages parameters() only, given a ``deepcopy`` of a
        BatchNorm model made and evaluated here."""
        helpers = [
            b
            for b in self.ctx.get(BoundCalls).calls
            if b.spec.role is Role.EMA_FUNCTION
            and b.spec.buffers == "no"
            and b.spec.in_project
            and b.spec.shadow is not None
        ]
        if not helpers:
            return
        buffers = self.ctx.get(NormLayers)
        if not buffers.has_batchnorm:
            return
        objects = self.ctx.get(AveragingObjects)
        reported: set[int] = set()
        for bound in helpers:
            assert bound.spec.shadow is not None
            shadow = bound.value(bound.spec.shadow)
            obj = objects.for_expression(shadow) if shadow is not None else None
            if obj is None or not obj.module_copy or id(obj) in reported:
                continue
            if any(u.shadow_method in _BUFFER_METHODS for u in obj.inplace) or (
                self._buffers_handled(obj, objects)
            ):
                continue
            teacher = self._teacher_in_eval(obj)
            if teacher is None and (obj.use is not Use.EVAL or not self._evaluated(obj)):
                continue
            reported.add(id(obj))
            helper = dotted_name(bound.call.func) or bound.spec.short_name
            self.report(
                bound.call,
                f"{helper}() averages parameters() only, but the model has "
                f"BatchNorm layers ({buffers.evidence()}): {obj.name}'s running statistics "
                f"stay those copied when it was made, so it is {self._used(teacher)} with "
                "normalisation statistics of the initial weights; copy or average the buffers "
                "too (or recalibrate them with update_bn)",
            )

    def _library_subclasses(self) -> None:
        """``class ParamEma(ModelEmaV2)`` of this module overriding the update to average
        ``self.module.parameters()`` only, made and evaluated here: the library's own
        update would have averaged the buffers too."""
        provider = self.ctx.get(InPlaceUpdates)
        updates = [u for u in provider.updates if u.shadow_method in _PARAMETER_METHODS]
        if not updates:
            return
        imports = self.ctx.get(ImportTable)
        index = self.ctx.index
        for cls in self.ctx.nodes(cst.ClassDef):
            assert isinstance(cls, cst.ClassDef)
            spec = next(
                (
                    found
                    for base in cls.bases
                    for qualname in imports.qualified_names(base.value)
                    if (found := API_TABLE.get(qualname)) is not None
                    and found.role is Role.EMA_MODEL
                    and found.model_copy is not None
                ),
                None,
            )
            if spec is None:
                continue
            inner = f"self.{spec.model_copy}"
            mine = [
                u
                for u in updates
                if index.contains(cls, u.node)
                and u.shadow_container is not None
                and self.ctx.code(u.shadow_container) == inner
                and provider.discarded(u) is None
            ]
            if not mine or self._class_handles_buffers(cls):
                continue
            buffers = self.ctx.get(NormLayers)
            if not buffers.has_batchnorm or not self._instance_evaluated(cls, spec.model_copy):
                continue
            update = mine[0]
            node = update.loop.iter if update.loop is not None else update.node
            self.report(
                node,
                f"{cls.name.value} overrides {spec.short_name}'s update to average "
                f"{inner}.parameters() only, but the model has BatchNorm layers "
                f"({buffers.evidence()}): the copy's running statistics stay those copied when "
                "it was made, so it is evaluated with normalisation statistics of the initial "
                "weights; copy or average the buffers too (or recalibrate them with update_bn)",
                self._fix(update),
            )

    def _class_handles_buffers(self, cls: cst.ClassDef) -> bool:
        for call in self.ctx.index.descendants(cls, cst.Call):
            func = call.func  # type: ignore[attr-defined]
            if isinstance(func, cst.Attribute) and func.attr.value in (
                "buffers",
                "named_buffers",
                "state_dict",
                "load_state_dict",
            ):
                return True
        return False

    def _instance_evaluated(self, cls: cst.ClassDef, inner: str) -> bool:
        """An instance of ``cls`` is made in the module and its averaged model run, put in
        eval mode, saved or handed to a function other than the update."""
        index = self.ctx.index
        held: set[str] = set()
        for call in self.ctx.nodes(cst.Call):
            if not (isinstance(call.func, cst.Name) and call.func.value == cls.name.value):
                continue
            parent = index.parent(call)
            if isinstance(parent, cst.Assign):
                held.update(self.ctx.code(t.target) for t in parent.targets)
        if not held:
            return False
        models = {f"{name}.{inner}" for name in held}
        for call in self.ctx.nodes(cst.Call):
            if index.contains(cls, call):
                continue
            func = call.func
            if self.ctx.code(func) in models:
                return True  # ema.module(x)
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in USE_METHODS
                and self.ctx.code(func.value) in models
            ):
                return True  # ema.module.eval(), ema.module.state_dict()
            name = (dotted_name(func) or "").rsplit(".", 1)[-1]
            if name in ("deepcopy", "zip", "list"):
                continue
            if any(self.ctx.code(a.value) in models for a in call.args):
                return True  # validate(ema.module, loader)
        return False

    def _teacher_in_eval(self, obj: AveragingObject) -> cst.Call | None:
        """A teacher run in eval mode: the call whose output rests on its BatchNorm running
        statistics (a teacher run in train mode normalises with each batch's own)."""
        if obj.use is not Use.TEACHER:
            return None
        objects = self.ctx.get(AveragingObjects)
        modes = self.ctx.get(ModeTracker)
        if not modes.tracked(obj):
            return None
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "forward":
                func = func.value
            if not isinstance(func, (cst.Name, cst.Attribute)):
                continue
            if objects.for_expression(func) is not obj or self.ctx.index.contains(
                obj.creation, call
            ):
                continue
            if modes.mode_at(obj, call) is Mode.EVAL:
                return call
        return None

    @staticmethod
    def _used(teacher: cst.Call | None) -> str:
        return "run in eval mode as a teacher" if teacher is not None else "evaluated"

    # Judging -----------------------------------------------------------------------------------
    def _buffers_handled(self, obj: AveragingObject, objects: AveragingObjects) -> bool:
        if any(u.shadow_method in _BUFFER_METHODS for u in obj.inplace):
            return True
        return id(obj) in self._handling(objects)

    def _handling(self, objects: AveragingObjects) -> set[int]:
        """The objects whose buffers some call of the module reads or loads, or that a
        recalibration call is handed: one scan of the calls per module, not per object."""
        if self._handled is not None:
            return self._handled
        found: set[int] = set()
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in (
                "buffers",
                "named_buffers",
                "load_state_dict",
            ):
                held = objects.for_expression(func.value)
                if held is not None:
                    found.add(id(held))
                continue
            name = dotted_name(func) or ""
            if _RECALIBRATE.search(name.rsplit(".", 1)[-1]):
                for arg in call.args:
                    held = objects.for_expression(arg.value)
                    if held is not None:
                        found.add(id(held))
        self._handled = found
        return found

    def _evaluated(self, obj: AveragingObject) -> bool:
        """The copy is called, put in eval mode, saved, or handed to another function."""
        return self.ctx.get(WholeUses).first(obj) is not None

    def _message(self, obj: AveragingObject, buffers: NormLayers, teacher: cst.Call | None) -> str:
        name = obj.name
        return (
            f"{name} is averaged over parameters() only, but the model has BatchNorm layers "
            f"({buffers.evidence()}): {name}'s running statistics stay those copied when it "
            f"was made, so it is {self._used(teacher)} with normalisation statistics of the "
            "initial weights; copy or average the buffers too (or recalibrate them with "
            "update_bn)"
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
