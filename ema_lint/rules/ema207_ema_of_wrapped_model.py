"""EMA207: the averaged copy is made of a DDP / DataParallel / FSDP / compiled model."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObject, AveragingObjects, Use
from ..analysis.objects.triggers import AVERAGING_EVIDENCE, requiring
from ..analysis.objects.wrappers import UNWRAP_ATTRIBUTE, ModelWrappers, Wrapping
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule

_PREFIX = {"torch.compile": "_orig_mod."}
# Wrappers that synchronise a module across processes (an average must not be given one).
_SYNCING = {"DistributedDataParallel", "DataParallel", "FullyShardedDataParallel"}


class EmaOfWrappedModel(Rule):
    """
    ## What it finds
    An averaged copy made from a model that is wrapped for distributed or compiled
    training at that point: ``copy.deepcopy(model)``, ``AveragedModel(model)``,
    ``ModelEmaV3(model)``, ema-pytorch's ``EMA(model)``... after ``model =
    DistributedDataParallel(model)``, ``DataParallel``, ``FullyShardedDataParallel``,
    ``torch.compile(model)``, ``model, opt = accelerator.prepare(model, opt)`` or
    ``deepspeed.initialize(model=model)``. The wrapper is followed through the assignments
    to the same name (or ``self.`` attribute) before the copy, in the same function, and
    into the functions of the module that return it (``model = wrap_model(model, args)``
    with ``return DistributedDataParallel(model)``, or ``model = DDP(model)`` under a
    condition then ``return model``), and, for a ``self.`` attribute, into the methods of
    the class called before the one that makes the copy (``self._wrap_model()`` then
    ``self._build_ema()``); a wrapping inside a branch (``if
    args.distributed:``), or on some paths of such a function, is reported as happening in
    some runs. The averaged copy itself given to ``DistributedDataParallel``, ``DataParallel`` or
    FSDP is reported too, unless the model it averages is wrapped alike (names match).
    A class that copies its ``model`` argument as given while another of its methods unwraps
    the same argument (``update`` reading ``unwrap_model(model)``, ``de_parallel(model)``,
    ``model.module if hasattr(model, "module") else model`` or a helper of the module that
    returns that) is reported too: the class is meant to be given wrapped models, and the
    copy of one is of the wrapper.

    Silent when the copy is made before the wrapping (timm's and EDM's recipe), of the
    unwrapped model (``model.module``, ``model._orig_mod``, ``accelerator.unwrap_model``,
    ``model_without_ddp``), by APIs that unwrap their input themselves (ultralytics and
    YOLOX ``ModelEMA``), for timm's first ``ModelEma`` of a DataParallel model (it keeps the
    ``module.`` keys in step; made after the DDP wrapper, which its docs forbid, it is
    reported), and for APIs that average a list of parameters (diffusers
    ``EMAModel(unet.parameters())``, torch-ema), which does not depend on names.

    ## Why it hurts training
    Deep-copying a DDP or FSDP wrapper copies its process group handles, gradient buckets
    and hooks: it fails, hangs, or leaves a second wrapper that takes part in gradient
    synchronisation. Even when the copy works (DataParallel, ``torch.compile``), its
    ``state_dict`` keys carry the wrapper's prefix (``module.``, ``_orig_mod.``): loading the
    averaged weights into the bare model for evaluation or export fails with ``strict=True``
    and silently loads nothing with ``strict=False``, and updates that match weights by name
    skip every parameter, so the "EMA" stays at its initial weights.

    ## Example
    ```python
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model, device_ids=[local_rank])
    ema_model = copy.deepcopy(model)
    ```

    ## Use instead
    ```python
    import copy

    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model, device_ids=[local_rank])
    ema_model = copy.deepcopy(model.module)
    ```

    ## Fix
    Safe: the copy is made of the unwrapped model, matching the wrapper: ``model.module``
    for DistributedDataParallel, DataParallel and DeepSpeed engines, ``model._orig_mod``
    for ``torch.compile``, ``accelerator.unwrap_model(model)`` for ``accelerator.prepare``.
    When the wrapping happens only in some runs, ``getattr(model, "module", model)`` (or
    ``"_orig_mod"``) works in both. For a class that unwraps the argument elsewhere, the
    copy is made of the same unwrapping expression. No fix for FSDP (its inner module holds
    flattened, sharded parameters: create the average before wrapping) or for a wrapper
    called inline in the copy.
    """

    code = "EMA207"
    name = "ema-of-wrapped-model"
    summary = "Averaged copy made of a DDP/DataParallel/FSDP/compiled model"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    # The wrappers, as the code spells them (torch.compile also imported on its own).
    # Their own evidence AND an averaging object or update.
    triggers = ()
    trigger_groups = requiring(
        (
            b"DataParallel",
            b"torch.compile",
            b"import compile",
            b", compile",
            b"compile as",
            b".prepare(",
            b"deepspeed",
        ),
        AVERAGING_EVIDENCE,
    )
    requires = (AveragingObjects, ModelWrappers)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        if not objects.objects:
            return
        wrappers = self.ctx.get(ModelWrappers)
        for obj in objects.objects:
            source = self._source(obj)
            if source is None:
                continue
            wrapping = wrappers.wrapped_at(source, obj.creation)
            if wrapping is None:
                self._unwrapped_elsewhere(obj, source, wrappers)
                continue
            if self._accepted(obj, wrapping):
                continue
            self.report(source, self._message(obj, source, wrapping), self._fix(source, wrapping))
        self._wrapped_copies(objects, wrappers)

    def _unwrapped_elsewhere(
        self, obj: AveragingObject, source: cst.BaseExpression, wrappers: ModelWrappers
    ) -> None:
        """A class that copies its ``model`` argument as given, while another of its methods
        unwraps the same argument (ultralytics-style ``update`` reading
        ``unwrap_model(model)``): the class is given wrapped models, so its copy is of the
        wrapper."""
        if obj.spec is not None:
            return
        unwrapping = wrappers.unwrapped_in_sibling(source, obj.creation)
        if unwrapping is None:
            return
        method = self.ctx.index.enclosing(unwrapping, cst.FunctionDef)
        where = f"{method.name.value}()" if isinstance(method, cst.FunctionDef) else "its class"
        code, unwrapped = self.ctx.code(source), self.ctx.code(unwrapping)
        self.report(
            source,
            f"{obj.name} is a copy of `{code}` as given, while {where} unwraps the same argument "
            f"(`{unwrapped}`): the class is meant to be "
            "given DDP / DataParallel models, and given one, this copy is of the wrapper: its "
            "state_dict keys start with `module.`, so name-keyed updates and loading it into "
            f"the bare model miss every weight; copy `{unwrapped}`",
            Fix.safe(
                "Average the unwrapped model",
                Edit.replace(source, cst.parse_expression(unwrapped)),
            ),
            related=[(unwrapping, f"{where} unwraps the argument here")],
        )

    def _wrapped_copies(self, objects: AveragingObjects, wrappers: ModelWrappers) -> None:
        """The averaged copy itself given to DDP / DataParallel / FSDP."""
        for call in self.ctx.nodes(cst.Call):
            assert isinstance(call, cst.Call)
            found = wrappers.wrapper_call(call)
            if found is None or found[0] not in _SYNCING or not call.args:
                continue
            first = call.args[0]
            if first.star or (first.keyword is not None and first.keyword.value != "module"):
                continue
            obj = objects.for_expression(first.value)
            if obj is None or obj.use not in (Use.EVAL, Use.UNKNOWN):
                continue
            if self._source_wrapped_alike(obj, call, found[0], wrappers):
                continue  # both sides wrapped: their names and keys still match
            self.report(
                call,
                f"the averaged copy {obj.name} is wrapped in {found[0]}: the wrapper "
                "synchronises gradients the average never has, its updates are not what the "
                "wrapper broadcasts, and its state_dict keys gain `module.`, so loading it "
                "into the bare model misses every weight; keep the average unwrapped",
            )

    def _source_wrapped_alike(
        self, obj: AveragingObject, call: cst.Call, wrapper: str, wrappers: ModelWrappers
    ) -> bool:
        if obj.source is None:
            return False
        source = self.ctx.code(obj.source)
        scope = self.ctx.index.enclosing(call, cst.FunctionDef) or self.ctx.module
        for other in self.ctx.index.descendants(scope, cst.Call):
            if other is call or not isinstance(other, cst.Call) or not other.args:
                continue
            found = wrappers.wrapper_call(other)
            if (
                found is not None
                and found[0] == wrapper
                and self.ctx.code(other.args[0].value) == source
            ):
                return True
        return False

    def _source(self, obj: AveragingObject) -> cst.BaseExpression | None:
        if obj.use is Use.NOT_WEIGHTS or obj.source is None:
            return None
        spec = obj.spec
        if spec is not None:
            if obj.virtual or spec.source_param != "model":
                return None
            if spec.accepts_wrapped and not spec.accepted_wrappers:
                return None
        elif any(u is obj.creation for u in obj.updates):
            return None  # a shadow found by its update, not a copy
        return obj.source

    def _accepted(self, obj: AveragingObject, wrapping: Wrapping) -> bool:
        """The API handles a copy of this wrapper (timm ``ModelEma``: DataParallel only)."""
        spec = obj.spec
        return (
            spec is not None and spec.accepts_wrapped and wrapping.wrapper in spec.accepted_wrappers
        )

    def _unwrapped(self, source: cst.BaseExpression, wrapping: Wrapping) -> str | None:
        code = self.ctx.code(source)
        if wrapping.assignment is None:
            return None
        if wrapping.wrapper == "accelerator.prepare":
            if wrapping.accelerator is None:
                return None
            return f"{self.ctx.code(wrapping.accelerator)}.unwrap_model({code})"
        attribute = UNWRAP_ATTRIBUTE.get(wrapping.wrapper)
        if attribute is None:
            return None
        if wrapping.conditional:
            return f'getattr({code}, "{attribute}", {code})'
        return f"{code}.{attribute}"

    def _message(self, obj: AveragingObject, source: cst.BaseExpression, wrapping: Wrapping) -> str:
        code = self.ctx.code(source)
        where = " in the runs where it is wrapped" if wrapping.conditional else ""
        prefix = _PREFIX.get(wrapping.wrapper, "module.")
        if wrapping.wrapper in ("DistributedDataParallel", "FullyShardedDataParallel") or (
            wrapping.wrapper in ("accelerator.prepare", "deepspeed.initialize")
        ):
            copying = "deep-copying the wrapper copies its process group and hooks (or fails), and "
        else:
            copying = ""
        unwrapped = self._unwrapped(source, wrapping)
        instead = (
            f"copy the unwrapped model `{unwrapped}`"
            if unwrapped is not None
            else "create the average from the model before wrapping it"
        )
        return (
            f"{obj.name} is a copy of `{code}`, which holds the model wrapped by "
            f"{wrapping.wrapper}{where}: {copying}the average's state_dict keys start with "
            f"`{prefix}`, so loading it into the bare model and name-keyed updates miss every "
            f"weight; {instead}"
        )

    def _fix(self, source: cst.BaseExpression, wrapping: Wrapping) -> Fix | None:
        unwrapped = self._unwrapped(source, wrapping)
        if unwrapped is None:
            return None
        return Fix.safe(
            "Average the unwrapped model",
            Edit.replace(source, cst.parse_expression(unwrapped)),
        )
