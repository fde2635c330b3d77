"""The training loop: which loop trains, which guard holds ``optimizer.step()``, where
validation happens, across the functions and methods of one module.

Loop bugs (an EMA updated on every micro-batch, before the step, validated in train mode)
are about where a statement sits relative to the backward pass, the optimizer step and its
accumulation guard. Real code splits the step across functions (``train_one_epoch`` calls
``self.optimizer_step()``), so every question here is answered through a small call graph of
the module's own functions: a call of a local function that steps *is* a step at that call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import libcst as cst

from .context import FileContext
from .names import dotted_name

Loop = cst.For | cst.While
FunctionNode = cst.FunctionDef | cst.Lambda

# Receivers of ``.step()`` that are optimizers (not schedulers, environments, EMA objects).
_OPTIMIZER_NAME = re.compile(r"(optim|^opt$|^opt_|_opt$|^opts?\d*$)", re.IGNORECASE)
_NOT_OPTIMIZER = re.compile(r"(sched|lr_|ema|swa|env|progress|bar|pbar|timer)", re.IGNORECASE)
_SCALER_NAME = re.compile(r"scaler", re.IGNORECASE)
# Identifiers that make a condition an accumulation / sync guard.
_ACCUMULATION_WORDS = re.compile(
    r"(accum|sync_gradients|update_freq|grad_acc|gradient_acc|iters_to_accumulate|"
    r"optimizer_step|should_step|do_step|took_step|step_now|is_update_step|need_update)",
    re.IGNORECASE,
)
_VALIDATION_FUNCTION = re.compile(
    r"(^|_)(val|valid|validate|validation|validate_\w+|eval|evaluate|evaluation|evaluator|"
    r"test|testing|inference|predict)(_|$)|validat|evaluat",
    re.IGNORECASE,
)
_VALIDATION_LOADER = re.compile(r"(^|_)(val|valid|validation|eval|test|dev)(_|$|\d)", re.IGNORECASE)
_NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled"}
_LOOP_WRAPPERS = {"enumerate", "tqdm", "iter", "zip", "islice", "progress_bar", "track"}


def _last_identifier(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Subscript):
        return _last_identifier(node.value)
    return None


def _identifiers(node: cst.CSTNode, index) -> Iterator[str]:
    if isinstance(node, cst.Name):
        yield node.value
    for name in index.descendants(node, (cst.Name,)):
        yield name.value


@dataclass(frozen=True, eq=False)
class Anchor:
    """Where a node is reached inside a training loop: itself, or a call leading to it."""

    loop: Loop
    node: cst.CSTNode  # a node inside ``loop``'s own function (the node or a call leading to it)
    chain: tuple[cst.Call, ...] = ()  # calls from the loop's function down to the node


class TrainingLoops:
    """The module's training loops and the facts about them."""

    MAX_CALL_DEPTH = 4

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.functions: list[cst.FunctionDef] = list(ctx.nodes(cst.FunctionDef))
        self._by_name: dict[str, list[cst.FunctionDef]] = {}
        for fn in self.functions:
            self._by_name.setdefault(fn.name.value, []).append(fn)
        self._callers: dict[int, list[cst.Call]] = {}
        self._local_calls: dict[int, list[cst.FunctionDef]] = {}
        self._calls_in: dict[int | None, list[cst.Call]] = {}
        for call in ctx.nodes(cst.Call):
            owner = self.function_of(call)
            self._calls_in.setdefault(id(owner) if owner is not None else None, []).append(call)
            targets = self._resolve_local_call(call)
            if targets:
                self._local_calls[id(call)] = targets
                for target in targets:
                    self._callers.setdefault(id(target), []).append(call)
        self.backward_calls = [c for c in ctx.nodes(cst.Call) if self.is_backward_call(c)]
        self.step_calls = [c for c in ctx.nodes(cst.Call) if self.is_step_call(c)]
        self._stepping = self._closure(self.step_calls)
        self._backwarding = self._closure(self.backward_calls)
        self.train_loops: list[Loop] = [
            loop
            for loop in (*ctx.nodes(cst.For), *ctx.nodes(cst.While))
            if self._loop_does(loop, self._stepping, self.step_calls)
            and self._loop_does(loop, self._backwarding, self.backward_calls)
        ]
        self.train_loops.sort(key=lambda loop: self.index.order[id(loop)])
        # Innermost ones: the loops over batches (an epoch loop around them trains too).
        self.step_loops: list[Loop] = [
            loop
            for loop in self.train_loops
            if not any(
                other is not loop and self.index.contains(loop, other) for other in self.train_loops
            )
        ]

    @classmethod
    def build(cls, ctx: FileContext) -> TrainingLoops:
        return cls(ctx)

    # Call graph ------------------------------------------------------------------------------
    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        found = self.index.enclosing(node, cst.FunctionDef)
        return found if isinstance(found, cst.FunctionDef) else None

    def class_of(self, fn: cst.FunctionDef) -> cst.ClassDef | None:
        parent = self.index.enclosing(fn, cst.ClassDef, cst.FunctionDef)
        return parent if isinstance(parent, cst.ClassDef) else None

    def _resolve_local_call(self, call: cst.Call) -> list[cst.FunctionDef]:
        func = call.func
        if isinstance(func, cst.Name):
            return [f for f in self._by_name.get(func.value, []) if self.class_of(f) is None]
        if (
            isinstance(func, cst.Attribute)
            and isinstance(func.value, cst.Name)
            and func.value.value in ("self", "cls", "super")
        ):
            caller_fn = self.function_of(call)
            caller_class = self.class_of(caller_fn) if caller_fn is not None else None
            methods = [f for f in self._by_name.get(func.attr.value, []) if self.class_of(f)]
            same_class = [f for f in methods if self.class_of(f) is caller_class]
            return same_class or methods
        return []

    def local_targets(self, call: cst.Call) -> list[cst.FunctionDef]:
        """The module's own functions a call may run (``f()``, ``self.m()``)."""
        return self._local_calls.get(id(call), [])

    def callers(self, fn: cst.FunctionDef) -> list[cst.Call]:
        return self._callers.get(id(fn), [])

    def calls_in(self, fn: cst.FunctionDef | None) -> list[cst.Call]:
        """Calls whose innermost enclosing function is ``fn`` (None: module level)."""
        return self._calls_in.get(id(fn) if fn is not None else None, [])

    def _closure(self, seeds: Iterable[cst.Call]) -> set[int]:
        """Functions that (transitively) contain one of ``seeds``."""
        doing: set[int] = set()
        frontier = [self.function_of(c) for c in seeds]
        while frontier:
            fn = frontier.pop()
            if fn is None or id(fn) in doing:
                continue
            doing.add(id(fn))
            for call in self.callers(fn):
                frontier.append(self.function_of(call))
        return doing

    def _calls_doing(self, call: cst.Call, doing: set[int]) -> bool:
        return any(id(t) in doing for t in self.local_targets(call))

    def _loop_does(self, loop: Loop, doing: set[int], direct: list[cst.Call]) -> bool:
        fn = self.function_of(loop)
        for call in self.calls_in(fn):
            if not self.index.contains(loop, call):
                continue
            if any(call is d for d in direct) or self._calls_doing(call, doing):
                return True
        return False

    # What a call is -------------------------------------------------------------------------
    def is_backward_call(self, call: cst.Call) -> bool:
        """``loss.backward()``, ``accelerator.backward(loss)``, ``self.manual_backward(loss)``."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return False
        name = func.attr.value
        if name == "backward":
            return True
        return name == "manual_backward"

    def is_step_call(self, call: cst.Call) -> bool:
        """An optimizer step: ``optimizer.step()``, ``scaler.step(optimizer)``,
        ``optim_wrapper.update_params(loss)``."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return False
        method = func.attr.value
        receiver = _last_identifier(func.value)
        if receiver is None:
            return False
        if method == "update_params":
            return "optim" in receiver.lower()
        if method != "step":
            return False
        if _SCALER_NAME.search(receiver):
            return bool(call.args)
        return bool(_OPTIMIZER_NAME.search(receiver)) and not _NOT_OPTIMIZER.search(receiver)

    def steps(self, call: cst.Call) -> bool:
        """The call performs an optimizer step, itself or through a local function."""
        return self.is_step_call(call) or self._calls_doing(call, self._stepping)

    def backpropagates(self, call: cst.Call) -> bool:
        return self.is_backward_call(call) or self._calls_doing(call, self._backwarding)

    # Where a node runs ----------------------------------------------------------------------
    def anchors(self, node: cst.CSTNode) -> list[Anchor]:
        """The training loops ``node`` runs in: directly, or through calls of its function."""
        found: list[Anchor] = []
        self._anchors(node, node, (), 0, found, set())
        return found

    def _anchors(
        self,
        node: cst.CSTNode,
        anchor: cst.CSTNode,
        chain: tuple[cst.Call, ...],
        depth: int,
        found: list[Anchor],
        seen: set[int],
    ) -> None:
        loop = self._innermost_train_loop(anchor)
        if loop is not None:
            found.append(Anchor(loop, anchor, chain))
            return
        fn = self.function_of(anchor)
        if fn is None or depth >= self.MAX_CALL_DEPTH or id(fn) in seen:
            return
        seen.add(id(fn))
        for call in self.callers(fn):
            self._anchors(node, call, (call, *chain), depth + 1, found, seen)

    def _innermost_train_loop(self, node: cst.CSTNode) -> Loop | None:
        fn = self.function_of(node)
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                return None
            if isinstance(ancestor, (cst.For, cst.While)) and any(
                ancestor is loop for loop in self.train_loops
            ):
                return ancestor
        return None

    def step_anchors(self, loop: Loop) -> list[cst.Call]:
        """Calls inside ``loop`` (in its own function) that step the optimizer."""
        fn = self.function_of(loop)
        return [
            call
            for call in self.calls_in(fn)
            if self.index.contains(loop, call) and self.steps(call)
        ]

    def guards(self, node: cst.CSTNode, loop: Loop) -> list[cst.If]:
        """Accumulation/sync conditions between ``loop`` and ``node``, innermost first."""
        found: list[cst.If] = []
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                break
            if isinstance(ancestor, cst.If) and self.is_accumulation_guard(ancestor):
                found.append(ancestor)
        return found

    def is_accumulation_guard(self, node: cst.If) -> bool:
        """A condition that holds only on some iterations: ``(i + 1) % accum == 0``,
        ``accelerator.sync_gradients``, ``took_step``, ``ni - last_opt_step >= accumulate``."""
        test = node.test
        if any(
            isinstance(op, cst.BinaryOperation) and isinstance(op.operator, cst.Modulo)
            for op in self.index.descendants(test, (cst.BinaryOperation,))
        ):
            return True
        if isinstance(test, cst.BinaryOperation) and isinstance(test.operator, cst.Modulo):
            return True
        return any(_ACCUMULATION_WORDS.search(name) for name in _identifiers(test, self.index))

    def accumulate_context(self, node: cst.CSTNode, loop: Loop | None = None) -> cst.With | None:
        """The ``with accelerator.accumulate(model):`` block holding ``node``, if any."""
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                return None
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    call = item.item
                    if (
                        isinstance(call, cst.Call)
                        and isinstance(call.func, cst.Attribute)
                        and call.func.attr.value in ("accumulate", "no_sync")
                    ):
                        return ancestor
        return None

    def micro_batch_loops(self, node: cst.CSTNode, loop: Loop) -> list[Loop]:
        """Loops between ``loop`` and ``node`` that backpropagate without stepping."""
        fn = self.function_of(loop)
        found: list[Loop] = []
        for ancestor in self.index.ancestors(node):
            if ancestor is loop:
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                inner = [c for c in self.calls_in(fn) if self.index.contains(ancestor, c)]
                if any(self.backpropagates(c) for c in inner) and not any(
                    self.steps(c) for c in inner
                ):
                    found.append(ancestor)
        return found

    def runs_per_micro_batch(self, node: cst.CSTNode) -> MicroBatchFinding | None:
        """Why ``node`` runs more often than the optimizer steps, or None if it does not.

        It does when, in its training loop, the step sits behind an accumulation guard that
        does not also hold ``node``; when it sits in an inner loop that backpropagates without
        stepping; or when it runs under ``accelerator.accumulate()`` outside
        ``if accelerator.sync_gradients:``.
        """
        for anchor in self.anchors(node):
            loop, here = anchor.loop, anchor.node
            if self.steps(here) if isinstance(here, cst.Call) else False:
                continue  # the node is reached through the step's own helper
            inner = self.micro_batch_loops(here, loop)
            if inner:
                return MicroBatchFinding(anchor, "loop", inner[0])
            own_guards = self.guards(here, loop)
            if own_guards:
                continue
            context = self.accumulate_context(here, loop)
            if context is not None:
                return MicroBatchFinding(anchor, "accumulate", context)
            for step in self.step_anchors(loop):
                step_guards = self.guards(step, loop)
                if step_guards and not any(self.index.contains(g, here) for g in step_guards):
                    return MicroBatchFinding(anchor, "guard", step_guards[-1], step)
        return None

    # Validation -----------------------------------------------------------------------------
    def is_validation_function(self, fn: cst.FunctionDef) -> bool:
        name = fn.name.value
        if _VALIDATION_FUNCTION.search(name) and not name.startswith("test_"):
            return True
        return self._decorated_no_grad(fn)

    def _decorated_no_grad(self, fn: cst.FunctionDef) -> bool:
        from .names import ImportTable

        imports = self.ctx.get(ImportTable)
        for decorator in fn.decorators:
            target = decorator.decorator
            if isinstance(target, cst.Call):
                target = target.func
            if any(q in _NO_GRAD for q in imports.qualified_names(target)):
                return True
        return False

    def no_grad_block(self, node: cst.CSTNode) -> cst.With | cst.FunctionDef | None:
        """The ``with torch.no_grad():`` (or inference_mode) block or decorated function."""
        from .names import ImportTable

        imports = self.ctx.get(ImportTable)
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    target = item.item.func if isinstance(item.item, cst.Call) else item.item
                    names = imports.qualified_names(target)
                    if any(q in _NO_GRAD for q in names):
                        if dotted_name(target) and dotted_name(target).endswith("set_grad_enabled"):
                            call = item.item
                            if not (
                                isinstance(call, cst.Call)
                                and call.args
                                and isinstance(call.args[0].value, cst.Name)
                                and call.args[0].value.value == "False"
                            ):
                                continue
                        return ancestor
            if isinstance(ancestor, cst.FunctionDef) and self._decorated_no_grad(ancestor):
                return ancestor
        return None

    def loop_iterable(self, loop: Loop) -> cst.BaseExpression | None:
        """What a ``for`` loop iterates, unwrapped from ``enumerate``/``tqdm``/``zip``..."""
        if not isinstance(loop, cst.For):
            return None
        node: cst.BaseExpression = loop.iter
        while isinstance(node, cst.Call) and node.args:
            name = _last_identifier(node.func)
            if name not in _LOOP_WRAPPERS:
                break
            node = node.args[0].value
        return node

    def is_validation_loop(self, loop: Loop) -> bool:
        iterable = self.loop_iterable(loop)
        if iterable is None:
            return False
        name = _last_identifier(iterable)
        return bool(name and _VALIDATION_LOADER.search(name))

    def is_validation_context(self, node: cst.CSTNode) -> bool:
        """Inside a validation function, a no-grad block, or a loop over a validation loader."""
        if self.no_grad_block(node) is not None:
            return True
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef) and self.is_validation_function(ancestor):
                return True
            if isinstance(ancestor, (cst.For, cst.While)) and self.is_validation_loop(ancestor):
                return True
        return False

    def epoch_loop(self, loop: Loop) -> Loop | None:
        """The loop around a training loop (over epochs), in the same or a calling function."""
        fn = self.function_of(loop)
        for ancestor in self.index.ancestors(loop):
            if ancestor is fn:
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                return ancestor
        if fn is None:
            return None
        for call in self.callers(fn):
            caller_fn = self.function_of(call)
            for ancestor in self.index.ancestors(call):
                if ancestor is caller_fn:
                    break
                if isinstance(ancestor, (cst.For, cst.While)):
                    return ancestor
        return None


@dataclass(frozen=True, eq=False)
class MicroBatchFinding:
    """Why a node runs per micro-batch: ``kind`` is "guard", "accumulate" or "loop"."""

    anchor: Anchor
    kind: str
    # The accumulation guard (If), the accumulate() block (With) or the inner loop.
    where: cst.CSTNode
    step: cst.Call | None = None
