"""Whether autograd records a statement: the grad mode it runs in, across the module's calls.

An in-place update of averaged weights outside ``torch.no_grad()`` is recorded by autograd:
the averaged tensors join the graph and each step chains onto the last. Whether a statement
runs with gradients enabled depends on where it sits: inside a ``with torch.no_grad():`` /
``torch.inference_mode()`` / ``torch.set_grad_enabled(False)`` block or a function decorated
with them, or, for a helper, in the places that call it. Real code puts the update in a
helper (``update_ema(ema, model, decay)``) or a method (``ema.update(model)``) and the
``no_grad`` around the call, so the answer follows the module's own call graph
(``TrainingLoops``), including method calls on instances of the module's classes and
``ema(model)`` for a class that defines ``__call__`` / ``forward``.
"""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.values import ValueResolver
from ema_lint.analysis.training.loops import TrainingLoops

# Functions a framework runs with gradients enabled (Lightning hooks, a module's forward, the
# usual names of a training step): a statement in one of them records unless guarded.
ENTRY_POINTS = frozenset(
    {
        "forward",
        "training_step",
        "train_step",
        "training_step_end",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_after_backward",
        "on_before_zero_grad",
        "on_before_optimizer_step",
        "optimizer_step",
        "train_one_epoch",
        "train_epoch",
    }
)


class GradMode:
    """Where autograd is on, for the statements of one module."""

    MAX_DEPTH = 6

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.loops = ctx.get(TrainingLoops)
        self.resolver = ctx.get(ValueResolver)
        self._method_calls: dict[int, list[cst.Call]] | None = None

    @classmethod
    def build(cls, ctx: FileContext) -> GradMode:
        return cls(ctx)

    # Public -----------------------------------------------------------------------------------
    def records(self, node: cst.CSTNode) -> bool | None:
        """True when ``node`` can run with gradients enabled; False when it always runs under
        ``no_grad`` (itself, or every call that reaches it); None when it cannot be told (a
        helper nothing in the module calls: its callers elsewhere may disable gradients)."""
        return self._records(node, 0, set())

    def guard(self, node: cst.CSTNode) -> cst.With | cst.FunctionDef | None:
        """The ``no_grad`` block or decorated function lexically around ``node``."""
        return self.loops.no_grad_block(node)

    def callers(self, fn: cst.FunctionDef) -> list[cst.Call]:
        """In-module calls of ``fn``: ``f()``, ``self.f()``, and ``obj.f()`` / ``obj()`` on an
        instance of its class."""
        found = list(self.loops.callers(fn))
        for call in self._instance_calls().get(id(fn), []):
            if all(call is not c for c in found):
                found.append(call)
        return found

    # Walking up the calls ---------------------------------------------------------------------
    def _records(self, node: cst.CSTNode, depth: int, seen: set[int]) -> bool | None:
        if self.loops.no_grad_block(node) is not None:
            return False
        fn = self.loops.function_of(node)
        if fn is None:
            return True  # module-level script code
        callers = self.callers(fn)
        if not callers:
            if depth > 0 or fn.name.value in ENTRY_POINTS or self._trains(fn):
                return True  # an entry point: main(), train(), a framework hook
            return None
        if depth >= self.MAX_DEPTH or id(fn) in seen:
            return None
        seen = seen | {id(fn)}
        answers = [self._records(call, depth + 1, seen) for call in callers]
        if any(a is True for a in answers):
            return True
        if all(a is False for a in answers):
            return False
        return None

    def _trains(self, fn: cst.FunctionDef) -> bool:
        return any(
            self.loops.function_of(call) is fn
            for call in (*self.loops.backward_calls, *self.loops.step_calls)
        )

    # Method calls on instances of the module's classes --------------------------------------
    def _instance_calls(self) -> dict[int, list[cst.Call]]:
        if self._method_calls is not None:
            return self._method_calls
        found: dict[int, list[cst.Call]] = {}
        methods: dict[str, list[cst.FunctionDef]] = {}
        for fn in self.loops.functions:
            owner = self.loops.class_of(fn)
            if owner is not None:
                methods.setdefault(fn.name.value, []).append(fn)
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            receiver: cst.BaseExpression | None = None
            names: tuple[str, ...] = ()
            if isinstance(func, cst.Attribute) and func.attr.value in methods:
                if isinstance(func.value, cst.Name) and func.value.value in ("self", "cls"):
                    continue  # TrainingLoops resolves these
                receiver, names = func.value, (func.attr.value,)
            elif isinstance(func, (cst.Name, cst.Attribute)):
                receiver, names = func, ("__call__", "forward")
            if receiver is None:
                continue
            candidates = [fn for name in names for fn in methods.get(name, [])]
            if not candidates:
                continue
            cls = self.resolver.instance_class(receiver)
            if cls is None:
                continue
            for fn in candidates:
                if self.loops.class_of(fn) is cls:
                    found.setdefault(id(fn), []).append(call)
                    break
        self._method_calls = found
        return found
