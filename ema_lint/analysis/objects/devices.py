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
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.syntax.vocabulary import tokens

_ACCELERATORS = ("cuda", "mps", "xla", "npu", "xpu")
_ACCELERATOR_APIS = {"accelerate.Accelerator", "torch.nn.parallel.DistributedDataParallel"}
# ``torch.cuda`` calls that need a GPU to run (``is_available()``, ``device_count()`` and
# seeding are also written by scripts that fall back to the CPU).
_CUDA_CALLS = {
    "set_device",
    "synchronize",
    "current_device",
    "current_stream",
    "Event",
    "Stream",
    "max_memory_allocated",
    "memory_allocated",
    "reset_peak_memory_stats",
}
# Strings that name an accelerator backend (``init_process_group("nccl")``).
_BACKENDS = ("nccl",)
# Moves of a module to a device: ``model.to(device)``, ``model.cuda()``.
_MOVES = ("to", "cuda")
# Helpers of another file whose name says they update an average (``ema(model, ema_model,
# decay)``, ``accumulate(g_ema, g)``, ``ema_update(model, model_ema, decay)``).
_UPDATE_WORDS = {"ema", "accumulate", "polyak"}


@dataclass(frozen=True, eq=False)
class CpuPlacement:
    """Where an averaged copy is put on the CPU.

    ``kind`` is "argument" (the API's ``device=`` argument: ``node`` is the ``Arg``),
    "call" (``.cpu()``, ``.to("cpu")``: ``node`` is the call), "device" (the device
    argument of a ``.to(...)`` that also converts something else: ``node`` is the ``Arg``),
    "class" (the API, a project class, puts its copy on the CPU itself: ``node`` is the
    creating call), or "before-move" (the copy was made of the model while it was still
    on the CPU, and only the model was moved to the device afterwards: ``node`` is the
    creating call, ``move`` the model's move). ``call`` is the call the argument belongs to.
    """

    kind: str
    node: cst.CSTNode
    call: cst.Call
    # For "before-move": the later move of the model the copy was made of.
    move: cst.Call | None = None


class Devices:
    """Device facts of one module."""

    MAX_DEPTH = 4

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.imports = ctx.get(ImportTable)
        self._accelerator: cst.CSTNode | bool | None = False
        self._sites: dict[int, list[cst.CSTNode]] = {}
        self._passing: list[tuple[cst.Call, list[cst.BaseExpression]]] | None = None
        self._passing_by_object: dict[int, list[cst.Call]] | None = None
        self._moves_by_object: dict[int, list[cst.Call]] | None = None
        # Asked once per averaging object: built once per module (see _scoped).
        self._scoped: (
            tuple[dict[int, list[cst.Assign]], dict[tuple[int, str], list[cst.Call]]] | None
        ) = None
        self._moving: list[cst.Call] | None = None

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
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in _CUDA_CALLS
                and "torch.cuda" in self.imports.qualified_names(func.value)
            ):
                return call
        for string in self.ctx.nodes(cst.SimpleString):
            value = string.evaluated_value  # type: ignore[attr-defined]
            if isinstance(value, str) and (
                value.split(":", 1)[0] in _ACCELERATORS or value in _BACKENDS
            ):
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
        """Where ``obj`` is put on the CPU before it is updated (and not moved to a device
        again before its first update: a transient CPU copy is not kept there)."""
        updates = self.update_sites(obj)
        found = [
            p for p in self._cpu_placements(obj, updates) if not self._moved_back(obj, p, updates)
        ]
        if not found:
            found = self._made_before_move(obj, updates)
        return found

    def _cpu_placements(
        self, obj: AveragingObject, updates: list[cst.CSTNode]
    ) -> list[CpuPlacement]:
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
        if spec is not None and bound is not None and spec.cpu_on_init and not bound.virtual:
            found.append(CpuPlacement("class", bound.call, bound.call))  # type: ignore[arg-type]
        for call in self._moves_of(obj):
            func = call.func
            assert isinstance(func, cst.Attribute)
            if updates and not any(self.index.is_before(call, u) for u in updates):
                continue  # after the last update: moving the final average for saving
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

    # Update sites ----------------------------------------------------------------------------
    def update_sites(self, obj: AveragingObject) -> list[cst.CSTNode]:
        """Where ``obj`` is updated: its own updates, the calls that pass it to a function of
        the module holding an average update of what that parameter holds (``update_ema(ema,
        model)`` over ``OrderedDict(ema_model.named_parameters())``), and the calls that give
        it to a helper of another file named for updating an average (``ema(model,
        ema_model, decay)``, ``accumulate(g_ema, g)``), whose body is not here."""
        cached = self._sites.get(id(obj))
        if cached is not None:
            return cached
        sites: list[cst.CSTNode] = list(obj.updates)
        for call in self._calls_passing().get(id(obj), ()):
            if call not in sites:
                sites.append(call)
        sites.sort(key=lambda n: self.index.order[id(n)])
        self._sites[id(obj)] = sites
        return sites

    def _calls_passing(self) -> dict[int, list[cst.Call]]:
        """The passing calls by the object they may hand over (``id`` of the object), so that
        each object's sites are a lookup, not a scan of every call per object."""
        if self._passing_by_object is None:
            objects = self.ctx.get(AveragingObjects)
            table: dict[int, list[cst.Call]] = {}
            for call, passed in self._passing_calls():
                handed = {id(o) for o in map(objects.for_expression, passed) if o is not None}
                for key in handed:
                    table.setdefault(key, []).append(call)
            self._passing_by_object = table
        return self._passing_by_object

    def _passing_calls(self) -> list[tuple[cst.Call, list[cst.BaseExpression]]]:
        """The calls that may update an object they are handed, with the arguments that
        would be it: calls of the module's functions that update an average, for the
        parameters those functions read; calls of imported helpers named for an update,
        for their first three arguments. Found once per module, not once per object."""
        if self._passing is not None:
            return self._passing
        objects = self.ctx.get(AveragingObjects)
        resolver = self.ctx.get(ValueResolver)
        updating: dict[int, cst.FunctionDef] = {}
        for other in objects.objects:
            for update in other.updates:
                fn = self.index.enclosing(update, cst.FunctionDef)
                if isinstance(fn, cst.FunctionDef):
                    updating[id(fn)] = fn
        found: list[tuple[cst.Call, list[cst.BaseExpression]]] = []
        for fn in updating.values():
            params = [
                p
                for p in (*fn.params.params, *fn.params.kwonly_params)
                if self._reads(fn, p.name.value)
            ]
            for call in resolver.callers(fn):
                passed = [resolver.argument_for(fn, p, call) for p in params]
                found.append((call, [a for a in passed if a is not None]))
        local = {fn.name.value for fn in self.ctx.nodes(cst.FunctionDef)}
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            if not isinstance(func, cst.Name) or func.value in local:
                continue
            if not self.imports.qualified_names(func) or not _names_an_update(func.value):
                continue
            if objects.for_expression(func) is not None or len(call.args) < 2:
                continue
            found.append((call, [a.value for a in call.args[:3]]))
        self._passing = found
        return found

    def _reads(self, fn: cst.FunctionDef, name: str) -> bool:
        return any(
            isinstance(n, cst.Name) and n.value == name
            for n in self.index.descendants(fn.body, cst.Name)
        )

    # Moves to a device --------------------------------------------------------------------------
    def is_device_move(self, call: cst.Call) -> bool:
        """``x.cuda()``, or ``x.to(d)`` with ``d`` a device other than the CPU: an
        accelerator string, ``device=``, or an expression named for a device (``device``,
        ``args.device``, ``rank``, ``local_rank``, ``accelerator.device``)."""
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _MOVES:
            return False
        if func.attr.value == "cuda":
            return True
        arg = self._device_arg(call)
        if arg is None or self.is_cpu(arg.value):
            return False
        if arg.keyword is not None and arg.keyword.value == "device":
            return True
        value = arg.value
        if isinstance(value, cst.SimpleString):
            text = value.evaluated_value
            return isinstance(text, str) and text.split(":", 1)[0] in _ACCELERATORS
        code = dotted_name(value)
        if code is None:
            return False
        last = code.rsplit(".", 1)[-1].lower()
        return any(w in last for w in ("device", "rank", "gpu", "cuda"))

    def _moved_back(
        self, obj: AveragingObject, placement: CpuPlacement, updates: list[cst.CSTNode]
    ) -> bool:
        """``obj`` is moved to a device (``.to(device)``, ``.cuda()``, handed to
        ``accelerator.prepare``) after ``placement`` and before its first update."""
        first = next((u for u in updates if self.index.is_before(placement.call, u)), None)
        for call in self.ctx.nodes(cst.Call):
            if not self.index.is_before(placement.call, call) or self.index.contains(
                placement.call, call
            ):
                continue
            if first is not None and not self.index.is_before(call, first):
                break
            if self._moves_object(call, obj):
                return True
        return False

    def _moves_object(self, call: cst.Call, obj: AveragingObject) -> bool:
        objects = self.ctx.get(AveragingObjects)
        func = call.func
        if not isinstance(func, cst.Attribute):
            return False
        if self.is_device_move(call) and objects.for_expression(func.value) is obj:
            return True
        if func.attr.value == "prepare":  # accelerate places what it prepares on its device
            return any(not a.star and objects.for_expression(a.value) is obj for a in call.args)
        return False

    def _made_before_move(
        self, obj: AveragingObject, updates: list[cst.CSTNode]
    ) -> list[CpuPlacement]:
        """The copy is made of a model built in this function and not yet moved, and only
        the model is moved to the device afterwards (``ema = AveragedModel(model)`` then
        ``model.to(device)``): the copy stays on the CPU."""
        spec, bound, source = obj.spec, obj.bound, obj.source
        creation = obj.creation
        if source is None or not isinstance(creation, cst.Call) or not updates:
            return []
        if spec is not None:
            if spec.role not in (Role.EMA_MODEL, Role.SWA_MODEL) or bound is None or bound.virtual:
                return []
            if spec.device is not None and bound.value(spec.device) is not None:
                return []
            if spec.cpu_offload is not None and bound.value(spec.cpu_offload[0]) is not None:
                return []
        elif not obj.module_copy:
            return []
        code = dotted_name(source)
        if code is None or not isinstance(source, (cst.Name, cst.Attribute)):
            return []
        scope = self.index.enclosing(creation, cst.FunctionDef)
        statement = self.index.statement(creation)
        if statement is None or self._chain_moves(creation):
            return []
        assigns, attribute_calls = self._scoped_nodes()
        made_here = False
        for assign in assigns.get(id(scope), ()):
            if not self.index.is_before(assign, creation):
                continue
            if any(dotted_name(t.target) == code for t in assign.targets):
                made_here = True
                if self._chain_moves(assign.value):
                    return []
        if not made_here:
            return []
        move: cst.Call | None = None
        for call in attribute_calls.get((id(scope), code), ()):
            if not self.is_device_move(call):
                continue
            if self.index.is_before(call, creation) or self.index.contains(statement, call):
                return []  # moved before the copy was made
            if move is None and any(self.index.is_before(call, u) for u in updates):
                move = call
        if move is None:
            return []
        for call in self._moving_calls():
            if self.index.is_before(creation, call) and self._moves_object(call, obj):
                return []
        return [CpuPlacement("before-move", creation, creation, move)]

    def _scoped_nodes(
        self,
    ) -> tuple[dict[int, list[cst.Assign]], dict[tuple[int, str], list[cst.Call]]]:
        """The module's assignments by enclosing function, and its ``x.method(...)`` calls by
        (enclosing function, ``x``), in document order: one pass, not one per object."""
        if self._scoped is None:
            assigns: dict[int, list[cst.Assign]] = {}
            calls: dict[tuple[int, str], list[cst.Call]] = {}
            for assign in self.ctx.nodes(cst.Assign):
                scope = self.index.enclosing(assign, cst.FunctionDef)
                assigns.setdefault(id(scope), []).append(assign)
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                if isinstance(func, cst.Attribute):
                    name = dotted_name(func.value)
                    if name is not None:
                        scope = self.index.enclosing(call, cst.FunctionDef)
                        calls.setdefault((id(scope), name), []).append(call)
            self._scoped = (assigns, calls)
        return self._scoped

    def _moving_calls(self) -> list[cst.Call]:
        """Calls that may move an object to a device (``.to()``/``.cuda()``, accelerate's
        ``prepare``), in document order."""
        if self._moving is None:
            self._moving = [
                call
                for call in self.ctx.nodes(cst.Call)
                if isinstance(call.func, cst.Attribute)
                and (call.func.attr.value == "prepare" or self.is_device_move(call))
            ]
        return self._moving

    def _chain_moves(self, expr: cst.CSTNode) -> bool:
        """A ``.to(device)`` / ``.cuda()`` in the call chain of ``expr``."""
        node = expr
        while isinstance(node, cst.Call):
            if self.is_device_move(node):
                return True
            func = node.func
            node = func.value if isinstance(func, cst.Attribute) else None
        return False

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

    def _moves_of(self, obj: AveragingObject) -> list[cst.Call]:
        """The ``cpu()``/``to()`` calls on ``obj``: the module's moves grouped by the object
        they move once, not searched per object."""
        if self._moves_by_object is None:
            objects = self.ctx.get(AveragingObjects)
            table: dict[int, list[cst.Call]] = {}
            for call in self._moves():
                moved = objects.for_expression(call.func.value)  # type: ignore[attr-defined]
                if moved is not None:
                    table.setdefault(id(moved), []).append(call)
            self._moves_by_object = table
        return self._moves_by_object.get(id(obj), [])

    def _device_arg(self, call: cst.Call) -> cst.Arg | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == "device":
                return arg
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if positional:
            return positional[0]
        return None

    # Offload idioms ----------------------------------------------------------------------------
    def offloaded(self, obj: AveragingObject, placement: CpuPlacement | None = None) -> str | None:
        """Why a CPU copy of ``obj`` is a documented offload, or None. A library that
        documents ``device='cpu'`` moves the model's tensors in its updates only when it is
        told so by that argument: a ``.cpu()`` of its object afterwards is not that mode."""
        spec, bound = obj.spec, obj.bound
        if (
            spec is not None
            and spec.cpu_documented
            and (placement is None or placement.kind == "argument")
        ):
            return f"{spec.short_name} documents device='cpu'"
        if spec is not None and bound is not None and spec.cpu_offload is not None:
            param, wanted = spec.cpu_offload
            expr = bound.value(param)
            if expr is not None:
                value = self.ctx.get(ValueResolver).resolve(expr)
                if value is not None and value.value == wanted:
                    return f"{param}={wanted}"
        if (
            placement is not None
            and placement.kind in ("argument", "call", "device")
            and self._chosen_by_condition(obj, placement)
        ):
            return "a placement chosen by a condition"
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

    def _chosen_by_condition(self, obj: AveragingObject, placement: CpuPlacement) -> bool:
        """The CPU placement is an option: it runs under an ``if`` (``if args.offload_ema:``,
        ``if offload:``) or a branch of a conditional expression, and the copy exists
        whichever way the condition goes (it is made outside the ``if``, or the other
        branch makes it too). A condition that tests the copy itself (``if ema is not
        None:``) or one that makes the copy only on one branch (``if args.use_ema: ema =
        deepcopy(model).cpu()``) chooses nothing about its device."""
        scope = self.index.enclosing(placement.node, cst.FunctionDef)
        for ancestor in self.index.ancestors(placement.node):
            if ancestor is scope:
                break
            if not isinstance(ancestor, (cst.If, cst.IfExp)):
                continue
            if self.index.contains(ancestor.test, placement.node):
                continue
            if self._tests_object(ancestor.test, obj):
                continue
            if isinstance(ancestor, cst.IfExp):
                return True
            if not self.index.contains(ancestor, obj.creation):
                return True
            if self._other_branch_binds(ancestor, obj):
                return True
        return False

    def _tests_object(self, test: cst.BaseExpression, obj: AveragingObject) -> bool:
        """``test`` reads the copy itself (``ema is not None``, ``self.ema``)."""
        nodes = [
            test,
            *self.index.descendants(test, cst.Attribute),
            *self.index.descendants(test, cst.Name),
        ]
        return any(
            dotted_name(n) in obj.names for n in nodes if isinstance(n, (cst.Name, cst.Attribute))
        )

    def _other_branch_binds(self, branch: cst.If, obj: AveragingObject) -> bool:
        """The branch of ``branch`` that does not make ``obj`` binds one of its names to
        something other than ``None``: the copy is made either way."""
        for assign in self.index.descendants(branch, cst.Assign):
            if not isinstance(assign, cst.Assign) or self.index.contains(assign, obj.creation):
                continue
            if self.index.contains(branch.test, assign):
                continue
            if self._same_branch(branch, assign, obj.creation):
                continue
            if isinstance(assign.value, cst.Name) and assign.value.value == "None":
                continue
            if any(dotted_name(t.target) in obj.names for t in assign.targets):
                return True
        return False

    def _same_branch(self, branch: cst.If, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        body = branch.body
        return self.index.contains(body, a) == self.index.contains(body, b)

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


def _names_an_update(name: str) -> bool:
    """``ema``, ``update_ema``, ``ema_update``, ``accumulate``, ``polyak_update``: a
    function name that says it moves an average towards the weights."""
    words = [w.lower() for w in tokens(name)]
    return (
        bool(words)
        and words[0] in _UPDATE_WORDS | {"update"}
        and (any(w in _UPDATE_WORDS | {"average", "averages"} for w in words))
    )
