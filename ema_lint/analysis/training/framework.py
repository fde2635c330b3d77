"""Training loops that a framework runs for you: Lightning hooks, Keras optimizers with a
built-in EMA, mmengine hooks and optimizer wrappers.

There is no loop in the code to read; the framework's contract says when each hook runs.
Lightning calls ``training_step`` and ``on_train_batch_end`` on every batch, the optimizer
steps once per ``accumulate_grad_batches`` batches, ``on_before_zero_grad`` and an
``optimizer_step`` override run once per step, and the validation hooks run with the
module in eval mode. Keras applies its EMA inside ``apply_gradients``, also on the steps
that only accumulate. mmengine's ``EMAHook`` updates after every iteration whatever the
optimizer wrapper's ``accumulative_counts``.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ema_lint.analysis.objects.apis import Role
from ema_lint.analysis.objects.averaging import AveragingObject
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import ValueResolver, is_time_constant
from ema_lint.analysis.training.loops import TrainingLoops

# Lightning hooks that run on every batch (per micro-batch when accumulating).
PER_BATCH_HOOKS = frozenset(
    {
        "training_step",
        "training_step_end",
        "on_train_batch_start",
        "on_train_batch_end",
        "on_before_backward",
        "on_after_backward",
    }
)
# Lightning hooks that run on every batch or every optimizer step.
PER_STEP_HOOKS = PER_BATCH_HOOKS | {
    "on_before_zero_grad",
    "optimizer_step",
    "on_before_optimizer_step",
}
# Lightning hooks that run with the LightningModule (and its child modules) in eval mode.
EVAL_HOOK_PREFIXES = ("validation_", "test_", "predict_", "on_validation_", "on_test_")
EVAL_HOOK_PREFIXES += ("on_predict_",)
_LIGHTNING_BASES = ("LightningModule", "Callback")
_HOOK_SUFFIXES = ("_step", "_step_end", "_epoch_end", "_epoch_start")
_HOOKS = frozenset({"forward", "backward", "configure_optimizers", "setup", "teardown"})
_STEP_WORDS = ("global_step", "should_accumulate", "accumulate_grad_batches")


class FrameworkHooks:
    """Hooks of framework-run training loops in one module."""

    MAX_DEPTH = 3

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.loops = ctx.get(TrainingLoops)
        self.resolver = ctx.get(ValueResolver)
        self.imports = ctx.get(ImportTable)
        self._class_table: dict[str, list[cst.ClassDef]] | None = None
        self._settings: dict[str, cst.BaseExpression | None] = {}
        self._reaching: dict[int, list[tuple[cst.FunctionDef, cst.CSTNode | None]]] = {}
        self.lightning_classes: list[cst.ClassDef] = [
            c for c in ctx.nodes(cst.ClassDef) if self._is_lightning(c)
        ]

    @classmethod
    def build(cls, ctx: FileContext) -> FrameworkHooks:
        return cls(ctx)

    # Lightning ---------------------------------------------------------------------------------
    def _is_lightning(self, cls: cst.ClassDef) -> bool:
        return self._lightning_base(cls, _LIGHTNING_BASES, set()) is not None

    def _lightning_base(
        self, cls: cst.ClassDef, bases: tuple[str, ...], seen: set[int]
    ) -> str | None:
        """The Lightning base class ``cls`` derives from, through the module's own classes
        (``class Base(pl.LightningModule)``, ``class Model(Base)``)."""
        if id(cls) in seen:
            return None
        seen.add(id(cls))
        for base in cls.bases:
            last = (dotted_name(base.value) or "").rsplit(".", 1)[-1]
            if last in bases:
                return last
            local = self._classes_named(last)
            for klass in local:
                found = self._lightning_base(klass, bases, seen)
                if found is not None:
                    return found
            if not local and self.ctx.project is not None:
                # A project class of another module (``from .base import BaseModule``).
                for qualname in self.imports.qualified_names(base.value)[:1]:
                    found = self.ctx.project.derives_from(qualname, bases)
                    if found is not None:
                        return found
        return None

    def _classes_named(self, name: str) -> list[cst.ClassDef]:
        if self._class_table is None:
            self._class_table = {}
            for node in self.ctx.nodes(cst.ClassDef):
                self._class_table.setdefault(node.name.value, []).append(node)
        return self._class_table.get(name, [])

    def is_lightning_module(self, cls: cst.ClassDef | None) -> bool:
        """A ``LightningModule`` subclass (not a callback), directly or through local bases."""
        if cls is None:
            return False
        return self._lightning_base(cls, ("LightningModule",), set()) is not None

    def lightning_hook(self, fn: cst.FunctionDef) -> bool:
        """``fn`` is a hook of a LightningModule or Lightning callback: a method Lightning
        calls itself (``training_step``, ``on_*``, ``*_epoch_end``, ``optimizer_step``...)."""
        name = fn.name.value
        if name.startswith("_"):
            return False
        if not (name.startswith("on_") or name.endswith(_HOOK_SUFFIXES) or name in _HOOKS):
            return False
        cls = self.loops.class_of(fn)
        return cls is not None and any(cls is c for c in self.lightning_classes)

    def is_eval_hook(self, fn: cst.FunctionDef) -> bool:
        """A LightningModule hook Lightning runs with the module in eval mode."""
        return self.lightning_hook(fn) and fn.name.value.startswith(EVAL_HOOK_PREFIXES)

    def hooks_reaching(self, node: cst.CSTNode) -> Iterator[tuple[cst.FunctionDef, cst.CSTNode]]:
        """Lightning hooks that run ``node``: (hook, the node or the call in the hook
        leading to it)."""
        for hook, call in self._hooks_of(self.loops.function_of(node)):
            yield hook, node if call is None else call

    def _hooks_of(
        self, start: cst.FunctionDef | None
    ) -> list[tuple[cst.FunctionDef, cst.CSTNode | None]]:
        """The hooks reaching anything in ``start`` (None: ``start`` is the hook itself),
        walked once per function: a module's updates share a few functions."""
        if start is None:
            return []
        known = self._reaching.get(id(start))
        if known is not None:
            return known
        found: list[tuple[cst.FunctionDef, cst.CSTNode | None]] = []
        frontier: list[tuple[cst.FunctionDef | None, cst.CSTNode | None, int]] = [(start, None, 0)]
        seen: set[int] = set()
        while frontier:
            fn, here, depth = frontier.pop()
            if fn is None or id(fn) in seen:
                continue
            seen.add(id(fn))
            if self.lightning_hook(fn):
                found.append((fn, here))
                continue
            if depth >= self.MAX_DEPTH:
                continue
            for call in self.loops.callers(fn):
                frontier.append((self.loops.function_of(call), call, depth + 1))
        self._reaching[id(start)] = found
        return found

    def anchor_in(self, node: cst.CSTNode, hook: cst.FunctionDef) -> cst.CSTNode:
        for found_hook, here in self.hooks_reaching(node):
            if found_hook is hook:
                return here
        return node

    def _manual_optimization(self, cls: cst.ClassDef) -> bool:
        for assign in self.index.descendants(cls, cst.Assign):
            for target in assign.targets:  # type: ignore[attr-defined]
                name = dotted_name(target.target) or ""
                if name.endswith("automatic_optimization"):
                    value = assign.value  # type: ignore[attr-defined]
                    if isinstance(value, cst.Name) and value.value == "False":
                        return True
        return False

    def _stepped(self, node: cst.CSTNode, stop: cst.CSTNode) -> bool:
        """A condition between ``node`` and ``stop`` says the optimizer stepped: an ``if``
        around ``node``, or an early exit before it (``if
        self.trainer.fit_loop._should_accumulate(): return``)."""
        for ancestor in self.index.ancestors(node):
            if ancestor is stop:
                break
            if isinstance(ancestor, cst.If) and self._step_check(ancestor):
                return True
        return self.loops.early_exit(node, stop, self._step_check) is not None

    def _step_check(self, statement: cst.If) -> bool:
        """A test of whether the optimizer stepped: an accumulation guard, or a test of
        Lightning's step counter or accumulation state."""
        if self.loops.is_accumulation_guard(statement):
            return True
        code = self.ctx.code(statement.test)
        return any(word in code for word in _STEP_WORDS)

    def accumulation_setting(self, keyword: str) -> cst.BaseExpression | None:
        """The first ``keyword=...`` argument or ``"keyword": ...`` entry of the module
        whose value may be above 1."""
        if keyword not in self._settings:
            self._settings[keyword] = self._accumulation_setting(keyword)
        return self._settings[keyword]

    def _accumulation_setting(self, keyword: str) -> cst.BaseExpression | None:
        for arg in self.index.keyword_arguments(keyword):
            if self._above_one(arg.value):
                return arg.value
        for mapping in self.ctx.nodes(cst.Dict):
            for element in mapping.elements:
                if (
                    isinstance(element, cst.DictElement)
                    and isinstance(element.key, cst.SimpleString)
                    and element.key.evaluated_value == keyword
                    and self._above_one(element.value)
                ):
                    return element.value
        return None

    def _sets_at_most_one(self, keyword: str) -> bool:
        """Every ``keyword=...`` argument of the module is known to be at most 1."""
        found = False
        for call in self.ctx.nodes(cst.Call):
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == keyword:
                    values = [v.number for v in self.resolver.possible(arg.value)]
                    if not values or any(v is None or v > 1 for v in values):
                        return False
                    found = True
        return found

    def _above_one(self, expr: cst.BaseExpression) -> bool:
        return any(is_time_constant(value.number) for value in self.resolver.possible(expr))

    def per_batch_updates(
        self, obj: AveragingObject
    ) -> Iterator[tuple[cst.CSTNode, cst.FunctionDef, cst.BaseExpression | int | None]]:
        """Updates of ``obj`` run by a per-batch Lightning hook (``training_step``,
        ``on_train_batch_end``, of a LightningModule or a callback) with no check that the
        optimizer stepped: (update, hook, the module's accumulate_grad_batches value above
        1, or the count a module importing the hook's class sets (cited as evidence), or
        None when neither is known: the setting may be on the command line)."""
        if not self.lightning_classes or not obj.updates:
            return
        setting = self.accumulation_setting("accumulate_grad_batches")
        if setting is None and self._sets_at_most_one("accumulate_grad_batches"):
            return  # the module's Trainer does not accumulate
        for update in obj.updates:
            for hook, here in self.hooks_reaching(update):
                if hook.name.value not in PER_BATCH_HOOKS:
                    continue
                cls = self.loops.class_of(hook)
                if cls is not None and self._manual_optimization(cls):
                    continue
                if self._stepped(update, hook) or (
                    here is not update and self._stepped(here, hook)
                ):
                    continue
                yield update, hook, setting if setting is not None else self._elsewhere(obj, hook)

    def _elsewhere(self, obj: AveragingObject, hook: cst.FunctionDef) -> int | None:
        """The ``accumulate_grad_batches`` above 1 that a module importing the hook's class
        sets (its Trainer), noted as the finding's evidence; None when none does."""
        cls = self.loops.class_of(hook)
        project = self.ctx.project
        if cls is None or project is None:
            return None
        names = [cls.name.value, *(sub.name.value for sub in self.resolver.subclasses(cls))]
        found = project.setting_in_importers(names, "accumulate_grad_batches")
        if found is None:
            return None
        count, evidence = found
        for name in obj.names:
            project.note(name, evidence, hook)
        return count

    # Keras -------------------------------------------------------------------------------------
    def optimizer_ema_accumulation(self, obj: AveragingObject):
        """An optimizer with a built-in EMA that accumulates gradients: (bound, steps)."""
        bound = obj.bound
        if bound is None or bound.spec.role is not Role.OPTIMIZER:
            return
        if "gradient_accumulation_steps" not in bound.spec.all_params:
            return
        expr = bound.value("gradient_accumulation_steps")
        if expr is not None and self._above_one(expr):
            yield bound, expr

    # mmengine ----------------------------------------------------------------------------------
    def mmengine_ema_accumulation(self, obj: AveragingObject):
        """An mmengine EMAHook in a config whose optimizer wrapper accumulates:
        (hook mapping, accumulative_counts value, unsafe fix or None)."""
        bound = obj.bound
        if bound is None or bound.spec.role is not Role.EMA_HOOK or bound.spec.forwards_to is None:
            return
        counts = self.accumulation_setting("accumulative_counts")
        if counts is None:
            return
        interval = bound.value("interval")
        count_value = self.resolver.number(counts)
        if interval is not None:
            value = self.resolver.number(interval)
            if value is None or count_value is None or value % count_value == 0:
                return
            yield bound.call, counts, None
            return
        yield bound.call, counts, self._interval_fix(bound, counts)

    def _interval_fix(self, bound, counts: cst.BaseExpression):
        from ema_lint.diagnostics import Edit, Fix

        if bound.has_star or not isinstance(counts, cst.Integer):
            return None
        node = bound.call
        value = cst.Integer(counts.value)
        if isinstance(node, cst.Call):
            args = list(node.args)
            if args:
                args[-1] = args[-1].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
            equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
            keyword = cst.Arg(value, keyword=cst.Name("interval"), equal=equal)
            new = node.with_changes(args=[*args, keyword])
        elif isinstance(node, cst.Dict):
            elements = list(node.elements)
            quote = "'"
            if elements and isinstance(elements[0], cst.DictElement):
                key = elements[0].key
                if isinstance(key, cst.SimpleString):
                    quote = key.quote
            if elements:
                elements[-1] = elements[-1].with_changes(
                    comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
            element = cst.DictElement(cst.SimpleString(f"{quote}interval{quote}"), value)
            new = node.with_changes(elements=[*elements, element])
        else:
            return None
        return Fix.unsafe(
            "Update the average once per accumulated optimizer step", Edit.replace(node, new)
        )
