"""BatchNorm recalibration written by hand: a module's own ``update_bn``.

Repositories often carry a copy of ``torch.optim.swa_utils.update_bn`` adapted to their
batches (dict batches, several inputs), or the original SWA code's ``bn_update(loader,
model)``. Such a function is recognised by what it does, whatever its name: it walks one
parameter's modules (``model.modules()``), touches their BatchNorm statistics
(``running_mean`` / ``running_var`` / ``reset_running_stats()`` / ``momentum``, also
through ``setattr(m, "momentum", ...)``), and runs
that parameter over the batches of a loop. Each call of it is then bound like a call of
``update_bn``: the argument it passes for the walked parameter is the ``model``, the one
for the looped-over parameter the ``loader``.
"""

from __future__ import annotations

from typing import Any

import libcst as cst

from ema_lint.analysis.objects.apis import API_SPECS, BoundCall, Role
from ema_lint.analysis.syntax.context import FileContext

_BN_STATE = frozenset(
    {"running_mean", "running_var", "reset_running_stats", "momentum", "num_batches_tracked"}
)
_UPDATE_BN = next(s for s in API_SPECS if s.role is Role.BN_UPDATE)


class LocalBnUpdates:
    """The module's own BatchNorm recalibration functions and their calls, bound as
    ``update_bn`` calls."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        # function name -> (index of the model parameter, index of the loader parameter)
        self.functions: dict[str, tuple[cst.FunctionDef, int, int | None]] = {}
        self.calls: list[BoundCall] = []
        if any(
            isinstance(a, cst.Attribute) and a.attr.value in _BN_STATE
            for a in ctx.nodes(cst.Attribute)
        ) or any(setattr_value(c, _BN_STATE) is not None for c in ctx.nodes(cst.Call)):
            for function in ctx.nodes(cst.FunctionDef):
                assert isinstance(function, cst.FunctionDef)
                found = self._recalibrates(function)
                if found is not None:
                    self.functions[function.name.value] = (function, *found)
        # Another module's recalibration helper (``from utils import bn_update``), from the
        # project's summaries: a call of it recalibrates as surely as a local one.
        project = ctx.project
        if not self.functions and project is None:
            return
        for call in ctx.nodes(cst.Call):
            assert isinstance(call, cst.Call)
            bound = self._bind(call)
            if bound is None and project is not None and not isinstance(call.func, cst.Call):
                bound = self._bind_project(call, project)
            if bound is not None:
                self.calls.append(bound)

    @classmethod
    def build(cls, ctx: FileContext) -> LocalBnUpdates:
        return cls(ctx)

    def _recalibrates(self, function: cst.FunctionDef) -> tuple[int, int | None] | None:
        params = [p.name.value for p in function.params.params]
        if not params:
            return None
        touches_bn = any(
            isinstance(a, cst.Attribute) and a.attr.value in _BN_STATE
            for a in self.index.descendants(function, cst.Attribute)
        ) or any(
            setattr_value(c, _BN_STATE) is not None  # type: ignore[arg-type]
            for c in self.index.descendants(function, cst.Call)
        )
        if not touches_bn:
            return None
        walked = None
        for call in self.index.descendants(function, cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in ("modules", "named_modules")
                and isinstance(func.value, cst.Name)
                and func.value.value in params
            ):
                walked = func.value.value
                break
        if walked is None:
            return None
        for loop in self.index.descendants(function, cst.For):
            assert isinstance(loop, cst.For)
            runs_model = any(
                isinstance(c, cst.Call) and isinstance(c.func, cst.Name) and c.func.value == walked
                for c in self.index.descendants(loop.body, cst.Call)
            )
            if not runs_model:
                continue
            iterated = loop.iter
            while isinstance(iterated, cst.Call) and iterated.args:  # enumerate(loader), tqdm
                iterated = iterated.args[0].value
            loader = (
                params.index(iterated.value)
                if isinstance(iterated, cst.Name) and iterated.value in params
                else None
            )
            return params.index(walked), loader
        return None

    def _bind(self, call: cst.Call) -> BoundCall | None:
        func = call.func
        name = func.value if isinstance(func, cst.Name) else None
        if name is None or name not in self.functions:
            return None
        function, model_at, loader_at = self.functions[name]
        if self.index.contains(function, call):
            return None
        params = [p.name.value for p in function.params.params]
        loader = params[loader_at] if loader_at is not None else None
        return _bound(call, name, params, params[model_at], loader)

    def _bind_project(self, call: cst.Call, project: Any) -> BoundCall | None:
        record = project.recalibrator(call)
        if record is None:
            return None
        return _bound(call, record.name, record.params, record.model, record.loader)


def _bound(
    call: cst.Call, name: str, params: list[str], model: str, loader: str | None
) -> BoundCall | None:
    """``call`` of a recalibration function taking ``params``, bound as ``update_bn``."""
    bound = BoundCall(_UPDATE_BN, call, name)
    wanted = {model: "model"}
    if loader is not None:
        wanted[loader] = "loader"
    for position, arg in enumerate(call.args):
        if arg.star:
            bound.has_star = True
            continue
        param = arg.keyword.value if arg.keyword is not None else None
        if param is None and position < len(params):
            param = params[position]
        if param in wanted:
            bound.args[wanted[param]] = arg
    return bound if "model" in bound.args else None


def setattr_value(call: cst.CSTNode, names: frozenset[str]) -> cst.BaseExpression | None:
    """The value of ``setattr(obj, "<name>", value)`` for a name of ``names`` spelled as a
    string in place (``setattr(m, "momentum", 0)``), or None."""
    if not (
        isinstance(call, cst.Call)
        and isinstance(call.func, cst.Name)
        and call.func.value == "setattr"
        and len(call.args) == 3
        and all(a.keyword is None and not a.star for a in call.args)
    ):
        return None
    name = call.args[1].value
    if not isinstance(name, cst.SimpleString) or name.evaluated_value not in names:
        return None
    return call.args[2].value
