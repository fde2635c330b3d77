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
from .optimizers import Optimizers

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
        self._optimizers: Optimizers | None = None
        self.functions: list[cst.FunctionDef] = list(ctx.nodes(cst.FunctionDef))
        self._by_name: dict[str, list[cst.FunctionDef]] = {}
        for fn in self.functions:
            self._by_name.setdefault(fn.name.value, []).append(fn)
        self._callers: dict[int, list[cst.Call]] = {}
        self._local_calls: dict[int, list[cst.FunctionDef]] = {}
        self._calls_in: dict[int | None, list[cst.Call]] = {}
        # Answers per loop or function, asked once per update: memoised to stay linear.
        self._step_anchors: dict[int, list[cst.Call]] = {}
        self._stepping_in: dict[int | None, list[cst.Call]] = {}
        self._micro_batch: dict[int, bool] = {}
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
        ``optim_wrapper.update_params(loss)``; ``sgd.step()`` when ``sgd`` is known to be an
        optimizer by where it was made (``analysis/optimizers.py``)."""
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
        if _SCALER_NAME.search(receiver) and call.args:
            return True
        if _OPTIMIZER_NAME.search(receiver) and not _NOT_OPTIMIZER.search(receiver):
            return True
        if self._optimizers is None:
            self._optimizers = self.ctx.get(Optimizers)
        return self._optimizers.is_optimizer(func.value)

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
        found = self._step_anchors.get(id(loop))
        if found is None:
            fn = self.function_of(loop)
            found = self._step_anchors[id(loop)] = [
                call for call in self.stepping_calls_in(fn) if self.index.contains(loop, call)
            ]
        return found

    def stepping_calls_in(self, fn: cst.FunctionDef | None) -> list[cst.Call]:
        """The calls of ``calls_in(fn)`` that step the optimizer, in document order."""
        key = id(fn) if fn is not None else None
        found = self._stepping_in.get(key)
        if found is None:
            found = self._stepping_in[key] = [c for c in self.calls_in(fn) if self.steps(c)]
        return found

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
            if isinstance(ancestor, (cst.For, cst.While)) and self._is_micro_batch(ancestor, fn):
                found.append(ancestor)
        return found

    def _is_micro_batch(self, loop: Loop, fn: cst.FunctionDef | None) -> bool:
        """``loop`` (in ``fn``) backpropagates without stepping."""
        flag = self._micro_batch.get(id(loop))
        if flag is None:
            inner = [c for c in self.calls_in(fn) if self.index.contains(loop, c)]
            flag = self._micro_batch[id(loop)] = any(
                self.backpropagates(c) for c in inner
            ) and not any(self.steps(c) for c in inner)
        return flag

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
    def is_validation_name(self, name: str) -> bool:
        """A function name that says it evaluates (``evaluate``, ``validate_ema``,
        ``run_eval``), not a test (``test_something``)."""
        return bool(_VALIDATION_FUNCTION.search(name)) and not name.startswith("test_")

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
        """Inside a validation function, a no-grad block, or a loop (or comprehension) over a
        validation loader."""
        if self.no_grad_block(node) is not None:
            return True
        for ancestor in self.index.ancestors(node):
            if isinstance(ancestor, cst.FunctionDef) and self.is_validation_function(ancestor):
                return True
            if isinstance(ancestor, (cst.For, cst.While)) and self.is_validation_loop(ancestor):
                return True
            if isinstance(ancestor, (cst.ListComp, cst.GeneratorExp, cst.SetComp, cst.DictComp)):
                comp: cst.CompFor | None = ancestor.for_in
                while comp is not None:
                    name = _last_identifier(comp.iter)
                    if name and _VALIDATION_LOADER.search(name):
                        return True
                    comp = comp.inner_for_in
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


@dataclass(frozen=True, eq=False)
class BeforeStep:
    """An update that runs before the optimizer step of the same iteration.

    ``node`` is where it sits in ``function`` (the update, or a call leading to it) and
    ``step`` the later call in the same function and iteration that steps the optimizer;
    ``loop`` is the training loop they run in (None: a step helper without a loop).
    """

    node: cst.CSTNode
    step: cst.Call
    function: cst.FunctionDef | None
    loop: Loop | None


class Placement:
    """Where an update sits relative to the optimizer step, and how to move it there.

    Used by the rules that report an update out of step with the optimizer and fix it by
    moving the update next to the step. A move is planned on statements: the statement to
    move (``movable``), the statement after which it goes (``after_step``), and whether
    the statements it would jump over read or write what it uses (``conflicts``).
    """

    def __init__(self, loops: TrainingLoops) -> None:
        self.loops = loops
        self.index = loops.index

    # Update before the step --------------------------------------------------------------
    def before_step(self, node: cst.CSTNode) -> BeforeStep | None:
        """The step that follows ``node`` in the same iteration, looked for from ``node``'s
        own function outwards through its callers up to the training loop."""
        loops = self.loops
        for anchor in loops.anchors(node):
            levels: list[cst.CSTNode] = [node, *reversed(anchor.chain)]
            for here in levels:
                fn = loops.function_of(here)
                at_loop = here is anchor.node
                own_loop = self._innermost_loop(here, fn)
                later: cst.Call | None = None
                earlier = False
                for call in loops.stepping_calls_in(fn):
                    if call is here:
                        continue
                    if loops.index.contains(call, here) or loops.index.contains(here, call):
                        continue
                    if self._innermost_loop(call, fn) is not own_loop:
                        continue
                    if self.index.is_before(here, call):
                        later = later or call
                    else:
                        earlier = True
                if earlier:
                    break  # the update already follows a step of its iteration
                if later is not None:
                    return BeforeStep(here, later, fn, anchor.loop if at_loop else None)
                if at_loop:
                    break
        return None

    def _innermost_loop(self, node: cst.CSTNode, fn: cst.FunctionDef | None) -> Loop | None:
        for ancestor in self.index.ancestors(node):
            if ancestor is fn:
                return None
            if isinstance(ancestor, (cst.For, cst.While)):
                return ancestor
        return None

    # Planning a move ----------------------------------------------------------------------
    def movable(
        self,
        node: cst.CSTNode,
        keep: set[int],
        leave: tuple[cst.CSTNode, ...] = (),
        within: cst.CSTNode | None = None,
    ) -> cst.BaseStatement | None:
        """The statement to move so that ``node`` runs elsewhere: the line holding it, or a
        compound statement around it that holds only updates (``if ema is not None:``,
        ``with torch.no_grad():``, the ``for`` over parameter pairs), given by the ids in
        ``keep``. None when moving it would take it out of a condition or a loop that also
        holds other code (other than the loops in ``leave``), or when the line holds more
        than the update.

        ``within`` is the block the statement is taken out of (the training loop).
        """
        statement = self.index.statement(node)
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        if not self._is_update_line(statement):
            return None
        current: cst.BaseStatement = statement
        while True:
            owner = self._owner(current)
            if owner is None or owner is within or any(owner is loop for loop in leave):
                break
            if not self._climbable(owner, keep):
                break
            current = owner
        # What is left between the statement and the block it is taken out of must not be
        # a condition or a loop it would silently leave.
        for ancestor in self.index.ancestors(current):
            if ancestor is within or isinstance(ancestor, (cst.FunctionDef, cst.Module)):
                break
            if any(ancestor is loop for loop in leave):
                continue
            if isinstance(ancestor, (cst.If, cst.For, cst.While, cst.Try, cst.Else)):
                return None
            if isinstance(ancestor, (cst.ExceptHandler, cst.Finally)):
                return None
        return current

    def _is_update_line(self, statement: cst.SimpleStatementLine) -> bool:
        small = statement.body[0]
        return isinstance(small, (cst.Expr, cst.Assign, cst.AugAssign))

    def _owner(self, statement: cst.CSTNode) -> cst.BaseCompoundStatement | None:
        """The compound statement whose body holds ``statement`` directly."""
        block = self.index.parent(statement)
        if not isinstance(block, cst.IndentedBlock):
            return None
        owner = self.index.parent(block)
        return owner if isinstance(owner, cst.BaseCompoundStatement) else None

    def _climbable(self, owner: cst.BaseCompoundStatement, keep: set[int]) -> bool:
        if isinstance(owner, cst.If) and owner.orelse is not None:
            return False
        if isinstance(owner, (cst.For, cst.While)):
            if owner.orelse is not None or any(owner is loop for loop in self.loops.train_loops):
                return False
        elif not isinstance(owner, (cst.If, cst.With)):
            return False
        body = owner.body
        if not isinstance(body, cst.IndentedBlock):
            return False
        return all(self._holds(statement, keep) for statement in body.body)

    def _holds(self, statement: cst.CSTNode, keep: set[int]) -> bool:
        if id(statement) in keep:
            return True
        return any(id(node) in keep for node in self.index.descendants(statement, cst.CSTNode))

    def after_step(self, step: cst.Call, loop: cst.CSTNode | None) -> cst.BaseStatement | None:
        """The statement after which an update goes to run right after ``step``: the
        statement holding the step in the innermost accumulation guard around it (or in the
        loop body, or the function body). A step in an ``if`` without ``else`` is
        conditional and the update goes right after it, inside; a step in each branch of an
        ``if``/``else`` gets the update after the whole statement."""
        fn = self.loops.function_of(step)
        guards = self.loops.guards(step, loop) if isinstance(loop, (cst.For, cst.While)) else []
        block_owner: cst.CSTNode | None = guards[0] if guards else loop
        if block_owner is None:
            block_owner = fn
        current = self.index.statement(step)
        while current is not None:
            owner = self._owner(current)
            if owner is block_owner or owner is None:
                break
            if isinstance(owner, cst.FunctionDef) or owner is fn:
                break
            if isinstance(owner, cst.Try) or (isinstance(owner, cst.If) and owner.orelse is None):
                break  # the step is conditional: the update goes with it
            current = owner
        if current is None or not isinstance(current, cst.BaseStatement):
            return None
        return current

    def conflicts(
        self, moved: cst.BaseStatement, target: cst.BaseStatement, objects: Iterable[str]
    ) -> bool:
        """Moving ``moved`` to right after ``target`` would change what it reads, or what
        the statements it jumps over read: a name it uses is assigned in between, or a
        statement in between reads the object it updates (``objects``: how the code spells
        it, ``ema``, ``self.ema``)."""
        start, end = (target, moved) if self.index.is_before(target, moved) else (moved, target)
        reads = _names_read(moved, self.index)
        spelled = set(objects)
        assigned: set[str] = set()
        for node in self._between(start, end, moved, target):
            assigned |= _names_assigned(node, self.index)
            if spelled & _codes_read(node, self.index):
                return True
        # Loop variables of the loops the statement leaves count as assigned in between.
        for ancestor in self.index.ancestors(moved):
            if self.index.contains(ancestor, target):
                break
            if isinstance(ancestor, cst.For):
                assigned |= _target_names(ancestor.target)
        return bool(reads & assigned)

    def _between(
        self,
        start: cst.CSTNode,
        end: cst.CSTNode,
        moved: cst.CSTNode,
        target: cst.CSTNode,
    ) -> Iterator[cst.CSTNode]:
        """Simple statements after ``start`` and before ``end`` (outside both)."""
        order = self.index.order
        lo, hi = order[id(start)], order[id(end)]
        fn = self.loops.function_of(start)
        for line in self.index.nodes(cst.SimpleStatementLine):
            position = order[id(line)]
            if not lo < position < hi:
                continue
            if self.index.contains(moved, line) or self.index.contains(target, line):
                continue
            if self.loops.function_of(line) is not fn:
                continue
            yield line

    def accumulate_owner(self, block: cst.With) -> cst.BaseExpression | None:
        """``accelerator`` in ``with accelerator.accumulate(model):``."""
        for item in block.items:
            call = item.item
            if (
                isinstance(call, cst.Call)
                and isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "accumulate"
            ):
                return call.func.value
        return None


def _target_names(node: cst.CSTNode) -> set[str]:
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List)):
        found: set[str] = set()
        for element in node.elements:
            found |= _target_names(element.value)
        return found
    if isinstance(node, cst.StarredElement):
        return _target_names(node.value)
    return set()


def _names_assigned(node: cst.CSTNode, index) -> set[str]:
    found: set[str] = set()
    if isinstance(node, cst.SimpleStatementLine):
        for small in node.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    found |= _target_names(target.target)
            elif isinstance(small, (cst.AugAssign, cst.AnnAssign)):
                found |= _target_names(small.target)
    for named in index.descendants(node, cst.NamedExpr):
        found |= _target_names(named.target)
    return found


def _names_read(node: cst.CSTNode, index) -> set[str]:
    return {n.value for n in index.descendants(node, cst.Name)}


def _codes_read(node: cst.CSTNode, index) -> set[str]:
    """Dotted names (``ema``, ``self.ema``, ``self.ema.module``) that ``node`` mentions."""
    found: set[str] = set()
    for sub in index.descendants(node, (cst.Name, cst.Attribute)):
        name = dotted_name(sub)
        if name:
            found.add(name)
    return found


def accumulation_steps(ctx: FileContext, finding: MicroBatchFinding) -> tuple[int, str] | None:
    """How many micro-batches one optimizer step spans, and the setting that says so:
    the ``k`` of the ``% k`` guard around the step, the ``gradient_accumulation_steps`` of
    the module's ``Accelerator(...)``, or the ``range(k)`` of an inner micro-batch loop."""
    from .run_length import RunLengths
    from .values import ValueResolver

    resolver = ctx.get(ValueResolver)

    def number(expr: cst.BaseExpression | None) -> tuple[int, str] | None:
        if expr is None:
            return None
        value = resolver.resolve(expr)
        if value is None or not isinstance(value.value, int) or isinstance(value.value, bool):
            return None
        if value.value < 2:
            return None
        shown = ctx.code(expr)
        return value.value, shown

    if finding.kind == "guard" and finding.step is not None:
        guard = finding.where
        if isinstance(guard, cst.If):
            for op in (guard.test, *ctx.index.descendants(guard.test, cst.BinaryOperation)):
                if isinstance(op, cst.BinaryOperation) and isinstance(op.operator, cst.Modulo):
                    found = number(op.right)
                    if found is not None:
                        return found
        count, _ = ctx.get(RunLengths).guard_interval(finding.step)
        return (count, str(count)) if count > 1 else None
    if finding.kind == "accumulate":
        for call in ctx.nodes(cst.Call):
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "gradient_accumulation_steps":
                    found = number(arg.value)
                    if found is not None:
                        return found
        return None
    loop = finding.where
    if isinstance(loop, cst.For) and isinstance(loop.iter, cst.Call):
        func = loop.iter.func
        if isinstance(func, cst.Name) and func.value == "range" and len(loop.iter.args) == 1:
            return number(loop.iter.args[0].value)
    return None
