"""EMA201: the averaged copy kept on the CPU and updated every step with blocking copies."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import (
    AveragingObject,
    AveragingObjects,
    Method,
    Use,
)
from ..analysis.objects.devices import CpuPlacement, Devices
from ..analysis.objects.run_length import RunLengths
from ..analysis.objects.triggers import UPDATE_EVIDENCE, requiring
from ..analysis.syntax.params import all_params
from ..analysis.syntax.values import ValueResolver
from ..analysis.syntax.vocabulary import tokens
from ..analysis.training.framework import PER_STEP_HOOKS, FrameworkHooks
from ..analysis.training.loops import TrainingLoops
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule
from ..statement_edits import without_argument

# Words of a loop's iterable that say it runs over batches (an epoch loop holds it).
_BATCH_WORDS = {"loader", "dataloader", "dl", "batches", "batch", "data", "dataset", "iterator"}


class ShadowOnCpu(Rule):
    """
    ## What it finds
    An evaluation EMA (or SWA copy) placed on the CPU (``.cpu()``, ``.to("cpu")``,
    ``.to(torch.device("cpu"))``, or the API's ``device="cpu"``) in a module whose model
    trains on an accelerator (``.cuda()``, a ``"cuda"`` device, ``Accelerator()``, DDP,
    ``torch.cuda.set_device(...)``, an ``"nccl"`` process group), and updated on every
    optimizer step: in the training loop (also one whose backward pass runs in another
    file, ``loss.accumulate_gradients(...)`` then ``opt.step()``), or in a Lightning hook
    that runs on every batch or step (``on_train_batch_end``, ``on_before_zero_grad``...).
    Updates are followed into the module's functions that are given the copy
    (``update_ema(ema, model)``) and to helpers of other files named for it (``ema(model,
    ema_model, decay)``, ``ema_update(...)``).

    Also reported:

    - a copy made from the model before the model is moved (``ema =
      AveragedModel(model)``, then ``model.to(device)`` or ``model = model.cuda()``) when
      nothing moves the copy: it stays on the CPU;
    - a CPU placement inside an EMA class of the module (``self.ema =
      deepcopy(model).cpu()``) whose own ``update()`` averages into it: the class is
      updated on every step by the loop that uses it;
    - an EMA class of another module of the project that puts its copy on the CPU in its
      ``__init__`` (``self.ema = deepcopy(model).cpu()``, unconditionally, with no method
      that moves tensors between devices itself), made in a module that trains on an
      accelerator and updated on every step there (no fix: the placement is in the other
      file);
    - an averaging class that copies the model it is given and puts the copy on the CPU in
      the same method, unconditionally (``self.ema = deepcopy(self.model).cpu()``), while its
      own methods average that model's tensors into the copy without moving them: reported
      even in a module with no accelerator in sight when no other module of the project
      makes the class (a library's class: it cannot know where the model trains; the
      project's own users are judged where they make it, as above). No fix: where the copy
      belongs is the caller's choice;
    - ``.cpu()`` of a timm ``ModelEma*`` object: the documented mode is the ``device=``
      argument, which also moves the model's tensors in each update.

    Silent for the documented offload idioms: pinned memory with ``non_blocking=True``
    copies (diffusers' ``--offload_ema``), an update every few steps (an ``if step % k ==
    0:`` guard, ema-pytorch's ``update_every``, mmengine's ``interval``), NeMo's
    ``cpu_offload=True``, ema-pytorch's ``allow_different_devices=True``, timm's
    ``device='cpu'`` (documented there as a memory trade-off), a device chosen by a flag
    (``"cpu" if args.ema_cpu else None``, a variable set to the CPU on one branch only),
    a CPU placement that is an option (under ``if args.offload_ema:`` or ``if offload:``,
    a branch of a conditional expression, or the CPU branch of an ``if``/``else`` that
    makes the copy either way; but not a condition that only tests the copy exists, ``if
    ema is not None:``, nor one that makes the copy only on the CPU), a move after the last
    update (saving the final average), a copy moved to the device before its first update
    (``ema.to(device)``, ``accelerator.prepare(model, ema)``), offloading around each step
    (``ema.to(device)``, ``ema.step(...)``, ``ema.to("cpu")``), a copy made after the
    model was moved or given ``device=``, an update once per epoch, and modules that never
    use an accelerator.

    ## Why it hurts training
    Every update reads all the weights from the accelerator into host memory with a
    synchronous copy: the step waits for the transfer of the whole model, and the
    accelerator idles. For a model of a few hundred million parameters that is a
    noticeable part of each step, paid on every step, for nothing the average needs: it
    costs one more copy of the weights in device memory to keep it there.

    ## Example
    ```python
    import copy

    model = model.cuda()
    ema_model = copy.deepcopy(model).cpu()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.999).add_(p.detach().to(e.device), alpha=0.001)
    ```

    ## Use instead
    ```python
    import copy

    model = model.cuda()
    ema_model = copy.deepcopy(model)
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(0.999).add_(p.detach().to(e.device), alpha=0.001)
    ```

    ## Fix
    Safe: the ``.cpu()`` call (or a ``.to("cpu")`` that only moves) is removed, or the
    ``device="cpu"`` argument of the API or of a ``.to(...)`` that also converts the dtype:
    the average stays on the device of the model it copies. No fix when a hand-written
    update itself moves tensors to the CPU (the update must change with the placement),
    when the device is a positional argument followed by others, or for a copy made
    before the model was moved (make it after the move, or move it the same way).
    """

    code = "EMA201"
    name = "ema-shadow-on-cpu"
    summary = "Averaged copy kept on the CPU while the model trains on an accelerator"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    # ``cpu`` (``.cpu()``, ``"cpu"``, ``torch.device("cpu")``) AND an averaging object: the
    # triggers of the objects (APIs, averaged names) or of a hand-written update. ``cpu``
    # alone is in a third of a training library's files.
    triggers = ()
    trigger_groups = requiring((b"cpu",), UPDATE_EVIDENCE)
    requires = (AveragingObjects, Devices, TrainingLoops)

    def finish(self) -> None:
        objects = self.ctx.get(AveragingObjects)
        if not objects.objects or not self._mentions_cpu():
            return
        devices = self.ctx.get(Devices)
        accelerator = devices.accelerator_use()
        if accelerator is None:
            self._classes_forcing_cpu(objects, devices)
            return
        for obj in objects.objects:
            if obj.use is not Use.EVAL:
                continue
            placements = [p for p in devices.cpu_placements(obj) if not devices.offloaded(obj, p)]
            if not placements or not self._every_step(obj, devices.update_sites(obj)):
                continue
            moves = obj.hand_made and devices.moves_in_update(obj)
            for placement in placements:
                if placement.kind == "before-move":
                    self.report(placement.node, self._before_move_message(obj, placement))
                    continue
                if placement.kind == "class":
                    self.report(placement.node, self._class_message(obj, accelerator))
                    continue
                fix = None if moves else self._fix(placement)
                self.report(placement.node, self._message(obj, accelerator), fix)

    def _classes_forcing_cpu(self, objects: AveragingObjects, devices: Devices) -> None:
        """An averaging class that copies the model it is given and puts the copy on the CPU
        in the same method, unconditionally, while its own methods average that model's
        tensors into the copy without moving them: the class cannot know where the model
        trains, so it is reported without evidence of an accelerator in the module."""
        loops = self.ctx.get(TrainingLoops)
        for obj in objects.objects:
            if obj.use is not Use.EVAL or obj.spec is not None or obj.source is None:
                continue
            if not any(n.startswith("self.") for n in obj.names):
                continue
            method = loops.function_of(obj.creation)
            owner = loops.class_of(method) if method is not None else None
            if owner is None or not self._given(obj.source, method):
                continue
            project = self.ctx.project
            if project is not None and project.mentioned_elsewhere(owner.name.value):
                continue  # its users are judged where they make it, on their device
            updates = devices.update_sites(obj)
            if not updates or devices.moves_in_update(obj) or devices.offloaded(obj):
                continue
            if any(loops.class_of(loops.function_of(u)) is not owner for u in updates):
                continue
            for placement in devices.cpu_placements(obj):
                if placement.kind != "call" or not self._unconditional(placement.node, method):
                    continue
                self.report(
                    placement.node,
                    f"{obj.name} is put on the CPU in {owner.name.value}.{method.name.value}() "
                    "whatever device the model it is given is on, and the class averages that "
                    "model's tensors into it in place: given a model on an accelerator, every "
                    "update mixes devices (it fails, or copies all the weights to host memory "
                    "on every step); keep the copy on the model's device",
                )

    def _given(self, source: cst.BaseExpression, method: cst.FunctionDef) -> bool:
        """``source`` is a parameter of ``method`` or a ``self.`` attribute it binds to one."""
        params = {p.name.value for p in all_params(method)}
        if isinstance(source, cst.Name):
            return source.value in params
        code = self.ctx.code(source)
        if not code.startswith("self."):
            return False
        for assign in self.ctx.index.descendants(method, cst.Assign):
            if (
                isinstance(assign, cst.Assign)
                and len(assign.targets) == 1
                and self.ctx.code(assign.targets[0].target) == code
                and isinstance(assign.value, cst.Name)
                and assign.value.value in params
            ):
                return True
        return False

    def _unconditional(self, node: cst.CSTNode, method: cst.FunctionDef) -> bool:
        for ancestor in self.ctx.index.ancestors(node):
            if ancestor is method:
                return True
            if isinstance(ancestor, (cst.If, cst.IfExp, cst.For, cst.While, cst.Try)):
                return False
        return False

    def _mentions_cpu(self) -> bool:
        objects = self.ctx.get(AveragingObjects).objects
        if any(o.spec is not None and o.spec.cpu_on_init for o in objects):
            return True  # a project class that puts its copy on the CPU itself
        return any(
            isinstance(c.func, cst.Attribute) and c.func.attr.value in ("cpu", "to", "device")
            for c in self.ctx.nodes(cst.Call)
        ) or any(
            a.keyword is not None and a.keyword.value == "device"
            for c in self.ctx.nodes(cst.Call)
            for a in c.args
        )

    def _every_step(self, obj: AveragingObject, updates: list[cst.CSTNode]) -> bool:
        """Updated on every optimizer step of a training loop."""
        spec, bound = obj.spec, obj.bound
        if spec is not None and spec.interval is not None and bound is not None:
            expr = bound.value(spec.interval.param)
            if expr is None:
                if spec.interval.default > 1 or not bound.is_default(spec.interval.param):
                    return False
            else:
                number = self.ctx.get(ValueResolver).number(expr)
                if number is None or number > 1:
                    return False
        loops = self.ctx.get(TrainingLoops)
        lengths = self.ctx.get(RunLengths)
        hooks = self.ctx.get(FrameworkHooks)
        for update in updates:
            count, guard = lengths.guard_interval(update)
            if count > 1 and not self._steps_under(guard, loops):
                continue  # an interval of its own, not the accumulation guard of the step
            for anchor in loops.anchors(update):
                if any(anchor.loop is loop for loop in loops.step_loops):
                    return True
            for hook, _ in hooks.hooks_reaching(update):
                if hook.name.value in PER_STEP_HOOKS:
                    return True
            if self._stepping_loop(update, loops, 0) or self._class_update(obj, update, loops):
                return True
        return False

    def _stepping_loop(self, node: cst.CSTNode, loops: TrainingLoops, depth: int) -> bool:
        """``node`` runs once per iteration of a loop that steps the optimizer, when the
        backward pass is not visible (``loss.accumulate_gradients(...)`` of another file):
        the loop holds a step, and no loop over batches inside it holds that step (then it
        is an epoch loop). Followed through the callers of ``node``'s function."""
        index = self.ctx.index
        fn = loops.function_of(node)
        steps = loops.stepping_calls_in(fn)
        for ancestor in index.ancestors(node):
            if ancestor is fn:
                break
            if not isinstance(ancestor, (cst.For, cst.While)):
                continue
            inner = [s for s in steps if index.contains(ancestor, s)]
            if inner:
                return not all(self._under_batch_loop(s, ancestor) for s in inner)
        if fn is None or depth >= 3:
            return False
        return any(self._stepping_loop(c, loops, depth + 1) for c in loops.callers(fn))

    def _under_batch_loop(self, step: cst.CSTNode, outer: cst.CSTNode) -> bool:
        for ancestor in self.ctx.index.ancestors(step):
            if ancestor is outer:
                return False
            if not isinstance(ancestor, cst.For):
                continue
            names = [ancestor.iter, *self.ctx.index.descendants(ancestor.iter, cst.Name)]
            if any(
                w.lower() in _BATCH_WORDS
                for n in names
                if isinstance(n, cst.Name)
                for w in tokens(n.value)
            ):
                return True
        return False

    def _class_update(
        self, obj: AveragingObject, update: cst.CSTNode, loops: TrainingLoops
    ) -> bool:
        """An EMA class of the module keeps the copy (``self.ema``) and updates it in its
        own update method, which nothing in the module calls: the class is made to be
        updated on every step by the training loop that uses it."""
        if obj.kind is not Method.EMA or not any(n.startswith("self.") for n in obj.names):
            return False
        method = loops.function_of(update)
        if method is None or loops.class_of(method) is None:
            return False
        if loops.class_of(method) is not self.ctx.index.enclosing(obj.creation, cst.ClassDef):
            return False
        words = [w.lower() for w in tokens(method.name.value)]
        return bool(set(words) & {"update", "step", "call"}) and not loops.callers(method)

    def _before_move_message(self, obj: AveragingObject, placement: CpuPlacement) -> str:
        move = placement.move
        shown = self.ctx.code(move) if move is not None else "the model's move"
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return (
            f"{obj.name} is made from the model while it is still on the CPU, and only the "
            f"model is moved to the device afterwards (`{shown}`): the average stays in host "
            "memory, and every update copies all the weights from the device synchronously "
            "(or fails on mixed devices); make the average after moving the model, or move "
            "it the same way"
        )

    def _steps_under(self, guard: cst.If | None, loops: TrainingLoops) -> bool:
        """The ``% k`` guard also holds the optimizer step: it is gradient accumulation, and
        the update under it still runs on every optimizer step."""
        if guard is None:
            return False
        return any(
            isinstance(call, cst.Call) and loops.steps(call)
            for call in self.ctx.index.descendants(guard, cst.Call)
        )

    def _class_message(self, obj: AveragingObject, accelerator: cst.CSTNode) -> str:
        shown = self.ctx.code(accelerator)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        spec = obj.spec
        made = f"{spec.short_name} ({spec.library})" if spec is not None else "its class"
        return (
            f"{obj.name} is made by {made}, which puts its copy on the CPU in its __init__, "
            f"while the model trains on an accelerator (`{shown}`): every update copies all "
            "the weights from the device to host memory synchronously (or fails on mixed "
            "devices); keep the copy on the model's device in the class, or move it there "
            "after creating it"
        )

    def _message(self, obj: AveragingObject, accelerator: cst.CSTNode) -> str:
        shown = self.ctx.code(accelerator)
        if len(shown) > 40:
            shown = shown[:37] + "..."
        return (
            f"{obj.name} is kept on the CPU while the model trains on an accelerator "
            f"(`{shown}`): every update copies all the weights from the device to host memory "
            "synchronously, and the step waits for it; keep the average on the model's "
            "device, or offload it with pinned memory and non_blocking copies"
        )

    def _fix(self, placement: CpuPlacement) -> Fix | None:
        title = "Keep the average on the model's device"
        call = placement.call
        if placement.kind in ("argument", "device"):
            arg = placement.node
            positional = [a for a in call.args if a.keyword is None]
            if isinstance(arg, cst.Arg) and arg.keyword is None and positional[-1] is not arg:
                return None
            assert isinstance(arg, cst.Arg)
            return Fix.safe(title, Edit.replace(call, without_argument(call, arg)))
        func = call.func
        assert isinstance(func, cst.Attribute)
        parent = self.ctx.parent(call)
        line = self.ctx.parent(parent) if parent is not None else None
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            if isinstance(parent, cst.Expr):
                return Fix.safe(title, Edit.remove(line))
            if (
                isinstance(parent, cst.Assign)
                and len(parent.targets) == 1
                and self.ctx.code(parent.targets[0].target) == self.ctx.code(func.value)
            ):
                return Fix.safe(title, Edit.remove(line))
        return Fix.safe(title, Edit.replace(call, func.value))
