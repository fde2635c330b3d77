"""EMA105: the averaged copy kept in float16 or bfloat16."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.apis import semantics_table
from ..analysis.objects.averaging import AveragingObject, AveragingObjects, Method, Use
from ..analysis.objects.horizon import format_number
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import InPlaceUpdate, InPlaceUpdates
from ..analysis.syntax.names import ImportTable
from ..analysis.syntax.values import Symbol, Value, ValueResolver
from ..analysis.syntax.vocabulary import is_averaged_name
from ..analysis.training.decays import DecaySettings
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule

_HALF = {
    "torch.float16": "torch.float16",
    "torch.half": "torch.float16",
    "torch.bfloat16": "torch.bfloat16",
    "numpy.float16": "float16",
    "jax.numpy.float16": "float16",
    "jax.numpy.bfloat16": "bfloat16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "half": "float16",
}
_CASTS = {"half": "torch.float16", "bfloat16": "torch.bfloat16"}
# Methods of a module that return the module itself: a chain through them builds one model.
_MODULE_CHAIN = frozenset({"train", "eval", "requires_grad_", "cuda", "cpu", "to", "float"})


def _half_name(value: Value) -> str | None:
    raw = value.value
    if isinstance(raw, Symbol):
        return _HALF.get(raw.qualname)
    if isinstance(raw, str):
        return _HALF.get(raw.lower().replace("torch.", ""))
    return None


def _model_of(source: cst.BaseExpression, more: tuple[str, ...] = ()) -> cst.Name | None:
    """The model an API is given: ``model``, or ``model`` of ``model.parameters()``."""
    if (
        isinstance(source, cst.Call)
        and not source.args
        and isinstance(source.func, cst.Attribute)
        and source.func.attr.value in ("parameters", "state_dict", *more)
    ):
        source = source.func.value
    return source if isinstance(source, cst.Name) else None


class LowPrecisionEma(Rule):
    """
    ## What it finds
    An averaged copy of the weights kept in float16 or bfloat16: a ``.half()`` /
    ``.bfloat16()`` / ``.to(dtype=...)`` / ``.to(device, torch.float16)`` on the EMA object
    or its inner model (``ema.module``), a ``dtype=`` argument of the EMA API, or a
    hand-made shadow copied from a half-precision model (``deepcopy(model.half())``). The
    dtype is followed through names: ``ema.to(device, dtype=weight_dtype)`` is reported
    when ``weight_dtype`` is half precision in some runs (the usual
    ``weight_dtype = torch.float16 if fp16 else ...`` of diffusion fine-tuning scripts).

    The copy also inherits half precision from the model it is made of:
    ``ema = deepcopy(model)`` where ``model = build(..., torch_dtype=dtype)`` and ``dtype``
    is half precision (followed through dtype converters and config defaults such as
    ``to_torch_dtype(cfg.get("dtype", "bf16"))``), ``model = net.half()`` or a
    ``model.half()`` on its own line (a module casts itself in place) before the copy. The
    same holds for the averaging APIs that deep-copy (or clone) the model they are given,
    in its dtype: ``AveragedModel(model)`` (an EMA, and an equal-weight SWA mean, whose
    ``1/(n+1)`` steps round away just the same), timm ``ModelEma`` / ``ModelEmaV2`` /
    ``ModelEmaV3`` without ``dtype=``, ema-pytorch ``EMA`` without its own ``ema_model=``,
    diffusers ``EMAModel(unet.parameters())``, ``torch_ema``, mmengine, ultralytics/YOLOX,
    EDM2's ``PowerFunctionEMA``: built from a model made or cast to half precision
    (``model = build().cuda().bfloat16()``, ``unet.to(device, dtype=torch.float16)``), the
    average is in half precision. A hand-made shadow whose entries are made half (a dict
    filled with ``p.detach().cpu().half()``, clones of one, or clones of the
    ``state_dict()`` / ``parameters()`` of a half-precision model) is updated in half
    precision wherever it lives (one finding per loop of updates).

    Silent for timm ``ModelEmaV3`` in bfloat16 with its default stochastic rounding, which
    is designed for that, and for a cast that comes after every update of the copy in the
    module (half precision for export or inference once training is done), and for a
    copy of a half model that is cast back (``deepcopy(model).to(torch.float32)``,
    ``ema.float()``, ``AveragedModel(model).to(torch.float32)``), for a shadow whose clones
    are cast to float (``v.detach().float().clone()``), for an API given its own dtype
    (``ModelEmaV3(model, dtype=torch.float32)``) or its own copy (ema-pytorch
    ``ema_model=``), for a model cast to half only after the average was made of it, and
    for mixed precision (``torch.autocast``), which keeps the weights in float32.

    ## Why it hurts training
    Each update moves the average by ``(1 - decay) * (weights - average)``: with a decay
    of 0.9999 that is 1e-4 of the difference. float16 resolves about 1e-3 of a value and
    bfloat16 about 8e-3, so most updates round to nothing: the average stalls near its
    initial weights, or moves in coarse, biased jumps. Training runs, and the "EMA" model
    is silently worse than the live one.

    ## Example
    ```python
    import copy

    import torch

    ema_model = copy.deepcopy(model)
    ema_model.to(device, dtype=torch.float16)
    ```

    ## Use instead
    ```python
    import copy

    import torch

    ema_model = copy.deepcopy(model)
    ema_model.to(device)
    ```

    ## Fix
    Safe where the cast is a separate call on the EMA copy: the cast is removed (the
    ``dtype`` argument of ``.to(device, dtype=...)``, a ``.half()`` in a chain, or a
    ``ema.half()`` statement), keeping any device move; the copy stays in the precision it
    was created in. Otherwise unsafe: the ``dtype=`` argument of the API becomes
    ``torch.float32`` (or is added, for a ``ModelEmaV3`` made of a half model), or the copy
    of a half-precision model is cast back with ``.float()``. No fix for the other APIs
    made of a half model: several of them average with fused ``_foreach`` ops that need
    the copy and the model in one dtype, so a cast of the copy alone can break the update;
    keep the model's master weights in float32 (mixed precision) or give the API a float32
    copy where it takes one.

    ## Shapes
    Each shape real training code uses, reported and silent.

    ### An averaging API made of a half-precision model
    The API copies the model as it is: cast to bfloat16 before, the average is bfloat16.
    ```python
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    model = build().cuda().bfloat16()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    ```
    ```python
    from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

    model = build().cuda()
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999))
    ```

    ### A shadow dict cloned from a half-precision model
    ```python
    import torch

    model = build().cuda().half()
    shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for k, v in model.state_dict().items():
            shadow[k].mul_(0.999).add_(v, alpha=0.001)
    ```
    ```python
    import torch

    model = build().cuda().half()
    shadow = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for k, v in model.state_dict().items():
            shadow[k].mul_(0.999).add_(v.float(), alpha=0.001)
    ```
    """

    code = "EMA105"
    name = "ema-low-precision"
    # Method-call statements on a bare name, by the name (see ``_method_statements``).
    _statements: dict[str, list[cst.Expr]] | None = None
    summary = "Averaged weights kept in float16 or bfloat16, where updates round away"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = UPDATE_EVIDENCE.triggers
    trigger_groups = UPDATE_EVIDENCE.groups
    requires = (AveragingObjects, ValueResolver)

    def finish(self) -> None:
        if not self._may_cast():
            return
        objects = self.ctx.get(AveragingObjects)
        if not objects.objects:
            return
        self._resolver = self.ctx.get(ValueResolver)
        for obj in objects.objects:
            if obj.use is Use.NOT_WEIGHTS:
                continue
            self._api_dtype(obj)
            self._copied_from_half(obj)
            self._wrapped_half(obj)
        self._half_updates(objects)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("half", "bfloat16", "to"):
                obj = objects.for_expression(func.value)
                if obj is not None and obj.use is not Use.NOT_WEIGHTS:
                    self._cast(call, obj)

    @classmethod
    def documentation(cls) -> str:
        return (
            super().documentation()
            + "\n\n## Semantics of the averaging APIs\n\n"
            + "The averaged copy is the object of any of these APIs (and hand-made "
            + "``deepcopy`` shadows); timm ``ModelEmaV3`` takes ``dtype=`` and "
            + "``stochastic_rounding=`` itself.\n\n"
            + semantics_table()
        )

    def _may_cast(self) -> bool:
        """A cheap look before building the averaging model: any cast or dtype at all."""
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in ("half", "bfloat16"):
                return True
            if any(a.keyword is not None and a.keyword.value == "dtype" for a in call.args):
                return True
            if isinstance(func, cst.Attribute) and func.attr.value == "to" and call.args:
                return True
        return False

    # What the dtype is -------------------------------------------------------------------------
    def _half(self, expr: cst.BaseExpression) -> tuple[str, bool] | None:
        """The half-precision dtype ``expr`` may be, and whether it always is."""
        values = self._resolver.possible(expr)
        halves = [h for h in (_half_name(v) for v in values) if h is not None]
        if not halves:
            return None
        return ("torch.bfloat16" if all("bfloat" in h for h in halves) else halves[0]), len(
            halves
        ) == len(values)

    def _stochastic_rounding(self, obj: AveragingObject, dtype: str) -> bool:
        spec = obj.spec
        if spec is None or spec.stochastic_rounding is None or "bfloat16" not in dtype:
            return False
        bound = obj.bound
        assert bound is not None
        expr = bound.value(spec.stochastic_rounding)
        if expr is None:
            return bound.is_default(spec.stochastic_rounding)
        value = self._resolver.resolve(expr)
        return value is not None and value.value is True

    def _message(self, obj: AveragingObject, dtype: str, always: bool, via: str = "") -> str:
        decay = self._decay(obj)
        step = (
            "(1 - decay) of the difference"
            if decay is None
            else (f"{format_number(round(1 - decay, 8))} of the difference")
        )
        if obj.kind is Method.SWA:
            step = "1/(n+1) of the difference after n models"
        when = "" if always else " in some runs"
        source = f" (through {via})" if via else ""
        return (
            f"the averaged copy {obj.name} is kept in {dtype.replace('torch.', '')}{when}"
            f"{source}: each update moves it by {step}, below half precision's resolution, "
            "so updates round away and the average stalls; keep it in float32"
        )

    def _decay(self, obj: AveragingObject) -> float | None:
        if obj.weight_call is None:
            return None
        setting = self.ctx.get(DecaySettings).for_call(obj.weight_call.call)
        return None if setting is None else setting.decay

    # Where the cast is ------------------------------------------------------------------------
    def _api_dtype(self, obj: AveragingObject) -> None:
        spec, bound = obj.spec, obj.bound
        if spec is None or bound is None or spec.dtype is None:
            return
        expr = bound.value(spec.dtype)
        if expr is None:
            return
        half = self._half(expr)
        if half is None or self._stochastic_rounding(obj, half[0]):
            return
        fix = None
        reference = self.ctx.get(ImportTable).local_reference("torch.float32")
        if reference is not None:
            fix = Fix.unsafe(
                "Keep the average in float32",
                Edit.replace(expr, cst.parse_expression(reference)),
            )
        self.report(expr, self._message(obj, *half), fix)

    def _copied_from_half(self, obj: AveragingObject) -> None:
        """``deepcopy(model.half())``: the copy is made from a half-precision model."""
        if not obj.hand_made or not isinstance(obj.creation, cst.BaseExpression):
            return
        deepcopy = self._deepcopy_call(obj.creation)
        if deepcopy is None or not deepcopy.args:
            return
        link: cst.BaseExpression = obj.creation
        while isinstance(link, cst.Call) and link is not deepcopy:
            assert isinstance(link.func, cst.Attribute)
            if link.func.attr.value in ("float", "double"):
                return  # cast back to full precision after the copy
            link = link.func.value
        inner = deepcopy.args[0].value
        if isinstance(inner, cst.Name):
            self._copied_from_half_model(obj, deepcopy, inner)
            return
        if not (isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute)):
            return
        dtype = self._cast_dtype(inner)
        if dtype is None:
            return
        fix = Fix.unsafe(
            "Cast the averaged copy back to float32",
            Edit.replace(
                deepcopy,
                cst.Call(cst.Attribute(deepcopy, cst.Name("float"))),
            ),
        )
        self.report(inner, self._message(obj, *dtype), fix)

    def _copied_from_half_model(
        self, obj: AveragingObject, deepcopy: cst.Call, model: cst.Name
    ) -> None:
        """``ema = deepcopy(model)`` where ``model`` was built or cast to half precision:
        ``model = build(..., torch_dtype=dtype).train()`` with a half ``dtype``,
        ``model = net.half()``. Silent when the copy is cast back to float afterwards."""
        value = self._value_before(model, deepcopy)
        dtype = self._built_half(value) if value is not None else None
        if dtype is None:
            dtype = self._cast_in_place_before(model, deepcopy, value)
        if dtype is None or self._cast_to_float(obj):
            return
        via = f"{model.value}, built in {dtype[0].replace('torch.', '')}"
        self.report(
            deepcopy.args[0].value,
            self._message(obj, dtype[0], dtype[1], via=via),
            Fix.unsafe(
                "Keep the averaged copy in float32",
                Edit.replace(deepcopy, cst.Call(cst.Attribute(deepcopy, cst.Name("float")))),
            ),
        )

    def _wrapped_half(self, obj: AveragingObject) -> None:
        """``ema = AveragedModel(model)`` (or timm ``ModelEmaV2``, ema-pytorch ``EMA``,
        diffusers ``EMAModel(model.parameters())``...) of a model built or cast to half
        precision: the API copies (or clones) its source in the source's dtype. Silent when
        the API is given its own dtype or its own copy, when the copy is cast back to
        float, and for timm ``ModelEmaV3`` in bfloat16 with stochastic rounding."""
        spec, bound = obj.spec, obj.bound
        if spec is None or bound is None or not spec.copies_source or obj.source is None:
            return
        for own in (spec.dtype, spec.own_copy):
            if own is not None and not bound.is_default(own):
                return
        model = _model_of(obj.source)
        if model is None:
            return
        value = self._value_before(model, obj.creation)
        dtype = self._built_half(value) if value is not None else None
        if dtype is None:
            dtype = self._cast_in_place_before(model, obj.creation, value)
        if dtype is None or self._stochastic_rounding(obj, dtype[0]) or self._cast_to_float(obj):
            return
        via = f"{model.value}, built in {dtype[0].replace('torch.', '')}"
        fix = None
        reference = self.ctx.get(ImportTable).local_reference("torch.float32")
        call = bound.call
        if spec.dtype is not None and reference is not None and isinstance(call, cst.Call):
            # timm ModelEmaV3 keeps its copy in the dtype it is given.
            added = cst.Arg(
                cst.parse_expression(reference),
                keyword=cst.Name(spec.dtype),
                equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""),
                    whitespace_after=cst.SimpleWhitespace(""),
                ),
            )
            args = list(call.args)
            if args:
                args[-1] = args[-1].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
            fix = Fix.unsafe(
                f"Keep the average in float32 ({spec.dtype}=)",
                Edit.replace(call, call.with_changes(args=[*args, added])),
            )
        self.report(obj.source, self._message(obj, dtype[0], dtype[1], via=via), fix)

    def _cast_in_place_before(
        self, name: cst.Name, at: cst.CSTNode, value: cst.BaseExpression | None
    ) -> tuple[str, bool] | None:
        """``model.half()`` on its own line (a module casts itself in place) after the model
        was last bound and before ``at``, in the same scope."""
        index = self.ctx.index
        scope = index.enclosing(at, cst.FunctionDef)
        found: tuple[str, bool] | None = None
        for statement in self._method_statements().get(name.value, ()):
            call = statement.value
            if not (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and index.enclosing(statement, cst.FunctionDef) is scope
                and index.is_before(statement, at)
                and (value is None or index.is_before(value, statement))
            ):
                continue
            if call.func.attr.value in ("float", "double"):
                found = None  # cast back before the copy
            else:
                found = self._built_half(call) or found
        return found

    def _method_statements(self) -> dict[str, list[cst.Expr]]:
        """Statements that are a method call on a bare name (``model.half()``), by the
        name, in document order: read once per file, not once per copy."""
        if self._statements is None:
            found: dict[str, list[cst.Expr]] = {}
            for statement in self.ctx.nodes(cst.Expr):
                call = statement.value
                if (
                    isinstance(call, cst.Call)
                    and isinstance(call.func, cst.Attribute)
                    and isinstance(call.func.value, cst.Name)
                ):
                    found.setdefault(call.func.value.value, []).append(statement)
            self._statements = found
        return self._statements

    def _value_before(self, name: cst.Name, at: cst.CSTNode) -> cst.BaseExpression | None:
        """The value ``name`` was last assigned before ``at`` in its scope (a model is often
        rebound later: ``model, opt = booster.boost(model, opt)``)."""
        bindings = self._resolver.bindings_of(name) or []
        index = self.ctx.index
        before = [
            b.value
            for b in bindings
            if b.kind == "assign"
            and b.value is not None
            and index.is_before(b.value, at)
            and not index.contains(b.value, at)
        ]
        return before[-1] if before else None

    def _built_half(self, value: cst.BaseExpression) -> tuple[str, bool] | None:
        """The half dtype a model expression has: a cast in its chain, or the ``dtype=`` /
        ``torch_dtype=`` of the call that builds it."""
        node = value
        while isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute):
                if func.attr.value in ("float", "double"):
                    return None
                dtype = self._cast_dtype(node)
                if dtype is not None:
                    return dtype
                if func.attr.value in _MODULE_CHAIN:
                    node = func.value
                    continue
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in ("dtype", "torch_dtype"):
                    return self._half_through(arg.value, 0)
            return None
        return None

    def _half_through(self, expr: cst.BaseExpression, depth: int) -> tuple[str, bool] | None:
        """``_half`` also through dtype converters and config defaults:
        ``to_torch_dtype(cfg.get("dtype", "bf16"))`` is bfloat16 unless configured."""
        half = self._half(expr)
        if half is not None or depth > 4:
            return half
        if isinstance(expr, cst.Name):
            value = self._resolver.assigned_value(expr)
            return None if value is None else self._half_through(value, depth + 1)
        if not isinstance(expr, cst.Call) or not expr.args:
            return None
        func = expr.func
        name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", "")
        if name == "get" and len(expr.args) >= 2:
            found = self._half_through(expr.args[1].value, depth + 1)
            return None if found is None else (found[0], False)  # the default: some runs
        if "dtype" in name.lower() and expr.args[0].keyword is None:
            return self._half_through(expr.args[0].value, depth + 1)
        return None

    def _cast_to_float(self, obj: AveragingObject) -> bool:
        """Some ``.float()`` / ``.to(torch.float32)`` of the averaged copy itself."""
        objects = self.ctx.get(AveragingObjects)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            if func.attr.value not in ("float", "to", "double"):
                continue
            if func.attr.value == "to" and not any(
                "float32" in self.ctx.code(a.value) or self.ctx.code(a.value) == "torch.float"
                for a in call.args
            ):
                continue
            if objects.for_expression(func.value) is obj or (
                self.ctx.index.contains(obj.creation, call)
            ):
                return True
        return False

    def _half_updates(self, objects: AveragingObjects) -> None:
        """A hand-written update of a shadow whose entries are half-precision tensors (a
        dict filled with ``v.cpu().half()``, or clones of one): the update itself is then
        computed and stored in half precision, wherever the shadow lives."""
        updates = self.ctx.get(InPlaceUpdates)
        found: dict[int, list[tuple[InPlaceUpdate, AveragingObject, str]]] = {}
        seen: set[int] = set()
        for update in updates.updates:
            obj = objects.of_update(update)
            if obj is None or id(obj) in seen or obj.use is Use.NOT_WEIGHTS:
                continue
            if update.shadow_container is None or not objects.averages_weights(update):
                continue
            dtype = self._half_entries(update.shadow_container, updates, 0)
            if dtype is None:
                continue
            seen.add(id(obj))
            # One finding per loop of updates: several shadows updated together share it.
            key = id(update.loop) if update.loop is not None else id(update.node)
            found.setdefault(key, []).append((update, obj, dtype))
        for group in found.values():
            first, obj, dtype = group[0]
            names = " and ".join(dict.fromkeys(o.name for _, o, _ in group))
            message = self._message(obj, dtype, True)
            if len(group) > 1:
                message = message.replace(f"copy {obj.name} is", f"copies {names} are", 1)
            self.report(first.node, message)

    def _half_entries(
        self, expr: cst.BaseExpression, updates: InPlaceUpdates, depth: int
    ) -> str | None:
        """The half dtype every entry of a container of tensors has, when its making shows
        it: ``{k: v.half() ...}``, a helper that stores ``v.cpu().half()``, clones of such."""
        if depth > 4:
            return None
        if isinstance(expr, cst.Name):
            value = self._resolver.assigned_value(expr)
            return None if value is None else self._half_entries(value, updates, depth + 1)
        element: cst.BaseExpression | None = None
        iterated: cst.BaseExpression | None = None
        if isinstance(expr, cst.Call):
            element = updates.helper_entries(expr)
        elif isinstance(expr, (cst.DictComp, cst.ListComp)):
            element = expr.value if isinstance(expr, cst.DictComp) else expr.elt
            iterated = expr.for_in.iter
        if element is None:
            return None
        node = element
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            dtype = self._cast_dtype(node)
            if dtype is not None and dtype[1]:
                return dtype[0]
            if node.func.attr.value in ("float", "double"):
                return None
            node = node.func.value
        if iterated is not None and isinstance(node, cst.Name):  # clones of another container
            inner = iterated
            if (
                isinstance(inner, cst.Call)
                and isinstance(inner.func, cst.Attribute)
                and inner.func.attr.value in ("items", "values")
            ):
                inner = inner.func.value
            model = _model_of(inner, ("named_parameters",))
            if model is not None and model is not inner:
                # ``{k: v.detach().clone() for k, v in model.state_dict().items()}`` of a
                # model built or cast to half precision: clones keep its dtype.
                value = self._value_before(model, expr)
                dtype = self._built_half(value) if value is not None else None
                if dtype is None:
                    dtype = self._cast_in_place_before(model, expr, value)
                return dtype[0] if dtype is not None and dtype[1] else None
            return self._half_entries(inner, updates, depth + 1)
        return None

    def _snapshot_of_average(self, call: cst.Call) -> bool:
        """The cast object is a fresh copy of an existing average, not a new shadow."""
        copied = self._deepcopy_call(call)
        if copied is None or copied is call or not copied.args:
            return False
        objects = self.ctx.get(AveragingObjects)
        source = copied.args[0].value
        if objects.for_expression(source) is not None:
            return True
        copy = objects.for_expression(call)
        if copy is not None and not copy.updates and is_averaged_name(self.ctx.code(source)):
            # ``deepcopy(ema_net).to(torch.float16)`` over ``for ema_net, suffix in
            # ema.get()``: a copy of an average (its name says so) that nothing here updates.
            return True
        # ``ema = self.ema.ema`` then ``ema = deepcopy(ema).half()``: a name bound twice, one
        # of its bindings an average.
        if isinstance(source, cst.Name):
            bindings = self._resolver.bindings_of(source) or []
            return any(
                b.kind == "assign"
                and b.value is not None
                and b.value is not copied
                and not self.ctx.index.contains(b.value, copied)
                and objects.for_expression(b.value) is not None
                for b in bindings
            )
        return False

    def _deepcopy_call(self, node: cst.BaseExpression) -> cst.Call | None:
        """The call at the root of a method chain (``deepcopy(m).half().cuda()``), the
        module-qualified ``copy.deepcopy(m)`` included."""
        while isinstance(node, cst.Call):
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value != "deepcopy":
                node = func.value
                continue
            return node
        return None

    def _cast_dtype(self, call: cst.Call) -> tuple[str, bool] | None:
        func = call.func
        assert isinstance(func, cst.Attribute)
        if func.attr.value in _CASTS:
            return (_CASTS[func.attr.value], True) if not call.args else None
        if func.attr.value != "to":
            return None
        expr = self._dtype_argument(call)
        return None if expr is None else self._half(expr)

    def _dtype_argument(self, call: cst.Call) -> cst.BaseExpression | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "dtype":
                return arg.value
        for arg in call.args:
            if arg.keyword is None and not arg.star and self._half(arg.value) is not None:
                return arg.value
        return None

    def _cast(self, call: cst.Call, obj: AveragingObject) -> None:
        if obj.hand_made and self._deepcopy_call(call) is not None:
            inner = self._deepcopy_call(call)
            if inner is not None and any(a.value is call for a in inner.args):
                return  # deepcopy(model.half()): reported on the copy
        dtype = self._cast_dtype(call)
        if dtype is None or self._stochastic_rounding(obj, dtype[0]):
            return
        index = self.ctx.index
        if obj.updates and not any(index.is_before(call, u) for u in obj.updates):
            return  # cast after the last update: half precision for export or inference
        if self._snapshot_of_average(call) and not any(
            index.is_before(call, u) for u in obj.updates
        ):
            return  # ``deepcopy(ema).half()``: a checkpoint snapshot of the average
        func = call.func
        assert isinstance(func, cst.Attribute)
        dtype_expr = self._dtype_argument(call) if func.attr.value == "to" else None
        via = ""
        if dtype_expr is not None and not isinstance(dtype_expr, cst.Attribute):
            via = self.ctx.code(dtype_expr)
        self.report(call, self._message(obj, *dtype, via=via), self._remove_cast(call, dtype_expr))

    def _remove_cast(self, call: cst.Call, dtype_expr: cst.BaseExpression | None) -> Fix | None:
        func = call.func
        assert isinstance(func, cst.Attribute)
        keep = [a for a in call.args if a.value is not dtype_expr]
        if dtype_expr is not None and keep:
            last = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return Fix.safe(
                "Remove the cast, keep the device move",
                Edit.replace(call, call.with_changes(args=[*keep[:-1], last])),
            )
        parent = self.ctx.parent(call)
        if isinstance(parent, cst.Expr):
            line = self.ctx.parent(parent)
            if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
                return Fix.safe("Remove the cast", Edit.remove(line))
            return None
        return Fix.safe("Remove the cast", Edit.replace(call, func.value))
