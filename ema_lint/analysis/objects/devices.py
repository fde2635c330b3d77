"""Devices: does the module train on an accelerator, is an averaged copy kept on the CPU,
and is it offloaded the documented way (pinned memory, non-blocking copies).

A CPU copy of the average is legitimate when the library documents it (timm
``device='cpu'``, NeMo ``cpu_offload=True``, ema-pytorch ``allow_different_devices=True``),
when the copies are asynchronous (diffusers ``--offload_ema``: ``pin_memory()`` and
``non_blocking=True``), when the update runs only every few steps, and in a module that
never uses an accelerator. Otherwise every update copies all weights from the device to
host memory, synchronously, in the middle of the training step.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.apis import Role
from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable
from ema_lint.analysis.syntax.values import ValueResolver

_ACCELERATORS = ("cuda", "mps", "xla", "npu", "xpu")
_ACCELERATOR_APIS = {"accelerate.Accelerator", "torch.nn.parallel.DistributedDataParallel"}


@dataclass(frozen=True, eq=False)
class CpuPlacement:
    """Where an averaged copy is put on the CPU.

    ``kind`` is "argument" (the API's ``device=`` argument: ``node`` is the ``Arg``),
    "call" (``.cpu()``, ``.to("cpu")``: ``node`` is the call) or "device" (the device
    argument of a ``.to(...)`` that also converts something else: ``node`` is the ``Arg``).
    ``call`` is the call the argument belongs to.
    """

    kind: str
    node: cst.CSTNode
    call: cst.Call


class Devices:
    """Device facts of one module."""

    MAX_DEPTH = 4

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.imports = ctx.get(ImportTable)
        self._accelerator: cst.CSTNode | bool | None = False

    @classmethod
    def build(cls, ctx: FileContext) -> Devices:
        return cls(ctx)

    # The module's accelerator ----------------------------------------------------------------
    def accelerator_use(self) -> cst.CSTNode | None:
        """A node that shows the module trains on an accelerator (``.cuda()``, a ``"cuda"``
        device, ``Accelerator()``, DDP), or None."""
        if self._accelerator is False:
            self._accelerator = self._find_accelerator()
        return self._accelerator  # type: ignore[return-value]

    def _find_accelerator(self) -> cst.CSTNode | None:
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
                return call
            if self.imports.resolve(func, _ACCELERATOR_APIS):
                return call
        for string in self.ctx.nodes(cst.SimpleString):
            value = string.evaluated_value  # type: ignore[attr-defined]
            if isinstance(value, str) and value.split(":", 1)[0] in _ACCELERATORS:
                return string
        return None

    # CPU placement -----------------------------------------------------------------------------
    def is_cpu(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """``"cpu"``, ``torch.device("cpu")``, or a name always bound to one of them."""
        if depth > self.MAX_DEPTH:
            return False
        if isinstance(expr, cst.SimpleString):
            return expr.evaluated_value == "cpu"
        if isinstance(expr, cst.Call):
            names = self.imports.qualified_names(expr.func)
            if "torch.device" in names and expr.args:
                return self.is_cpu(expr.args[0].value, depth + 1)
            return False
        if isinstance(expr, cst.Name):
            bindings = self.ctx.get(ValueResolver).bindings_of(expr) or []
            values = [b.value for b in bindings if b.kind == "assign"]
            if len(bindings) == 1 and len(values) == 1 and values[0] is not None:
                return self.is_cpu(values[0], depth + 1)
        return False

    def cpu_placements(self, obj: AveragingObject) -> list[CpuPlacement]:
        """Where ``obj`` is put on the CPU before it is updated."""
        found: list[CpuPlacement] = []
        spec, bound = obj.spec, obj.bound
        if (
            spec is not None
            and bound is not None
            and spec.device is not None
            and spec.role in (Role.EMA_MODEL, Role.SWA_MODEL)
            and not bound.virtual
        ):
            arg = bound.arg(spec.device)
            if isinstance(arg, cst.Arg) and self.is_cpu(arg.value):
                found.append(CpuPlacement("argument", arg, bound.call))  # type: ignore[arg-type]
        objects = self.ctx.get(AveragingObjects)
        for call in self._moves():
            func = call.func
            assert isinstance(func, cst.Attribute)
            if obj.updates and not any(self.index.is_before(call, u) for u in obj.updates):
                continue  # after the last update: moving the final average for saving
            if objects.for_expression(func.value) is not obj:
                continue
            if func.attr.value == "cpu":
                if not call.args:
                    found.append(CpuPlacement("call", call, call))
                continue
            device = self._device_arg(call)
            if device is None or not self.is_cpu(device.value):
                continue
            others = [a for a in call.args if a is not device]
            if any(_non_blocking(a) for a in call.args):
                continue
            kind = "call" if not others else "device"
            found.append(CpuPlacement(kind, call if kind == "call" else device, call))
        return found

    def _moves(self) -> list[cst.Call]:
        """``x.cpu()`` and ``x.to(...)`` calls of the module (collected once)."""
        found = getattr(self, "_move_calls", None)
        if found is None:
            found = self._move_calls = [
                c
                for c in self.ctx.nodes(cst.Call)
                if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("cpu", "to")
            ]
        return found

    def _device_arg(self, call: cst.Call) -> cst.Arg | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                return arg
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if positional:
            return positional[0]
        return None

    # Offload idioms ----------------------------------------------------------------------------
    def offloaded(self, obj: AveragingObject) -> str | None:
        """Why a CPU copy of ``obj`` is a documented offload, or None."""
        spec, bound = obj.spec, obj.bound
        if spec is not None and spec.cpu_documented:
            return f"{spec.short_name} documents device='cpu'"
        if spec is not None and bound is not None and spec.cpu_offload is not None:
            param, wanted = spec.cpu_offload
            expr = bound.value(param)
            if expr is not None:
                value = self.ctx.get(ValueResolver).resolve(expr)
                if value is not None and value.value == wanted:
                    return f"{param}={wanted}"
        objects = self.ctx.get(AveragingObjects)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            if func.attr.value == "pin_memory" and objects.for_expression(func.value) is obj:
                return "pinned memory"
            if any(_non_blocking(a) for a in call.args) and (
                objects.for_expression(func.value) is obj
                or any(self.index.contains(u, call) for u in obj.updates)
            ):
                return "non_blocking copies"
        return None

    def moves_in_update(self, obj: AveragingObject) -> bool:
        """A hand-written update that itself moves tensors to the CPU (``p.detach().cpu()``):
        the average cannot simply stay on the device."""
        for update in obj.updates:
            for call in self.index.descendants(update, cst.Call):
                func = call.func  # type: ignore[attr-defined]
                if not isinstance(func, cst.Attribute):
                    continue
                if func.attr.value == "cpu":
                    return True
                if func.attr.value == "to":
                    device = self._device_arg(call)  # type: ignore[arg-type]
                    if device is not None and self.is_cpu(device.value):
                        return True
        return False


def _non_blocking(arg: cst.Arg) -> bool:
    return (
        arg.keyword is not None
        and arg.keyword.value == "non_blocking"
        and isinstance(arg.value, cst.Name)
        and arg.value.value == "True"
    )
