"""How long a training run is, when the code says so statically.

An EMA horizon only means something relative to the run: 10,000 updates is right for a
300-epoch ImageNet run and absurd for a 3,000-step fine-tune. The run length is read, in
order of reliability, from:

1. the loops around the EMA's update call: ``for epoch in range(E): for step in
   range(S): ...`` (also through one caller of the function), ``islice(loader, S)``,
   ``while step < MAX``; guards such as ``if (i + 1) % accum == 0`` around the update
   divide the count;
2. a Lightning ``Trainer``: ``max_steps``, else ``max_epochs`` x integer
   ``limit_train_batches``, divided by ``accumulate_grad_batches``;
3. an mmengine config: ``train_cfg = dict(by_epoch=False, max_iters=N)`` or an
   ``IterBasedTrainLoop``;
4. settings named for it (argparse options, module constants, dataclass fields, config
   dicts): ``max_steps`` / ``max_train_steps`` / ``total_steps`` / ``max_iters`` ..., or
   ``epochs`` x ``steps_per_epoch`` divided by ``gradient_accumulation_steps``.

Counts are in *update calls* of the averaging object where the loops are known, else in
optimizer steps; both are what an EMA horizon (in updates, times its interval) compares to.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.values import ValueResolver

_TRAINERS = {"lightning.pytorch.Trainer", "pytorch_lightning.Trainer", "lightning.Trainer"}
_STEP_NAMES = (
    "max_steps",
    "max_train_steps",
    "total_steps",
    "num_train_steps",
    "train_steps",
    "num_steps",
    "max_iters",
    "total_iters",
    "max_iter",
    "num_iterations",
    "total_iterations",
    "train_iters",
    "num_training_steps",
    "training_steps",  # jaxline's config.training_steps
)
_EPOCH_NAMES = ("epochs", "num_epochs", "max_epochs", "num_train_epochs", "n_epochs", "epoch")
_PER_EPOCH_NAMES = (
    "steps_per_epoch",
    "iters_per_epoch",
    "num_steps_per_epoch",
    "iterations_per_epoch",
    "batches_per_epoch",
    "num_batches",
)
_ACCUMULATION_NAMES = (
    "gradient_accumulation_steps",
    "accumulate_grad_batches",
    "grad_accum_steps",
    "grad_accum",
    "accum_iter",
    "accumulation_steps",
    "accum_steps",
    "gradient_accumulation",
    "accumulate",
    "update_freq",
)


@dataclass(frozen=True)
class RunLength:
    """The number of update calls (or optimizer steps) in the run, and how it was found."""

    steps: float
    via: str
    unit: str = "steps"


class RunLengths:
    """Run-length questions for one module."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.resolver = ctx.get(ValueResolver)
        self.imports = ctx.get(ImportTable)
        self._named: RunLength | bool | None = False
        self._trainers: list[cst.Call] | None = None
        self._mmengine: RunLength | bool | None = False

    @classmethod
    def build(cls, ctx: FileContext) -> RunLengths:
        return cls(ctx)

    # Public ---------------------------------------------------------------------------------
    def for_updates(
        self, updates: list[cst.CSTNode], creation: cst.CSTNode | None = None
    ) -> RunLength | None:
        """The run length seen by an averaging object updated at ``updates``."""
        for update in updates:
            found = self._from_loops(update)
            if found is not None:
                return found
        if creation is not None:
            found = self._from_trainer(creation)
            if found is not None:
                return found
        return self._from_mmengine() or self._from_names()

    def guard_interval(self, node: cst.CSTNode) -> tuple[int, cst.If | None]:
        """The product of ``% k == 0`` guards with a resolvable ``k`` around ``node`` in its
        function, and the innermost such guard."""
        product = 1
        innermost: cst.If | None = None
        function = self.index.enclosing(node, cst.FunctionDef)
        for ancestor in self.index.ancestors(node):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.If) and self.index.contains(ancestor.body, node):
                k = self._modulo(ancestor.test)
                if k is not None:
                    product *= k
                    innermost = innermost or ancestor
        return product, innermost

    # Loops ------------------------------------------------------------------------------------
    def _modulo(self, test: cst.BaseExpression) -> int | None:
        """``(i + 1) % k == 0`` / ``not i % k`` / ``i % k == 0`` -> k."""
        node = test
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            node = node.expression
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            node = node.left
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            value = self.resolver.resolve(node.right)
            if value is not None and isinstance(value.value, int) and value.value > 1:
                return value.value
        return None

    def _loop_count(self, loop: cst.For | cst.While) -> tuple[float, str] | None:
        if isinstance(loop, cst.While):
            test = loop.test
            if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
                op = test.comparisons[0].operator
                if isinstance(op, (cst.LessThan, cst.LessThanEqual)):
                    value = self.resolver.resolve(test.comparisons[0].comparator)
                    if value is not None and value.number is not None and value.number > 0:
                        return value.number, self._show(test.comparisons[0].comparator, value)
            return None
        iterable = loop.iter
        while (
            isinstance(iterable, cst.Call)
            and dotted_name(iterable.func) in ("enumerate", "tqdm", "tqdm.tqdm", "iter")
            and iterable.args
        ):
            iterable = iterable.args[0].value
        if not isinstance(iterable, cst.Call):
            return None
        name = dotted_name(iterable.func) or ""
        args = [a for a in iterable.args if a.keyword is None and not a.star]
        if name == "range" and 1 <= len(args) <= 3:
            values = [self.resolver.resolve(a.value) for a in args]
            if any(v is None or v.number is None for v in values):
                return None
            numbers = [v.number for v in values]  # type: ignore[union-attr]
            start, stop, step = 0.0, numbers[0], 1.0
            if len(numbers) >= 2:
                start, stop = numbers[0], numbers[1]
            if len(numbers) == 3:
                step = numbers[2]
            if step <= 0:
                return None
            count = max(0.0, (stop - start) / step)
            if len(args) == 1:
                return count, self._show(args[0].value, values[0])
            return count, f"{self.ctx.code(iterable).strip()}={_count(count)}"
        if name.endswith("islice") and len(args) >= 2:
            value = self.resolver.resolve(args[-1].value)
            if value is not None and value.number is not None:
                return value.number, self._show(args[-1].value, value)
        return None

    def _show(self, expr: cst.BaseExpression, value) -> str:
        from ema_lint.analysis.objects.horizon import format_count

        code = self.ctx.code(expr).strip()
        number = format_count(value.number)
        return number if code == number or code == str(value.value) else f"{code}={number}"

    def _from_loops(self, update: cst.CSTNode) -> RunLength | None:
        counts: list[tuple[float, str]] = []
        node: cst.CSTNode = update
        for _ in range(3):  # the update's function, and up to two single callers up
            function = self.index.enclosing(node, cst.FunctionDef)
            for ancestor in self.index.ancestors(node):
                if ancestor is function:
                    break
                if isinstance(ancestor, (cst.For, cst.While)) and self.index.contains(
                    ancestor.body, node
                ):
                    count = self._loop_count(ancestor)
                    if count is None:
                        return None
                    counts.append(count)
            if not isinstance(function, cst.FunctionDef):
                break
            callers = self.resolver.callers(function)
            if len(callers) != 1:
                break
            node = callers[0]
        if not counts:
            return None
        total = 1.0
        for count, _ in counts:
            total *= count
        guard, _ = self.guard_interval(update)
        parts = " x ".join(text for _, text in reversed(counts))
        if guard > 1:
            total /= guard
            parts += f" / {guard}"
        if total <= 0:
            return None
        return RunLength(total, f"loops of {parts}", "updates")

    # Lightning ----------------------------------------------------------------------------
    def _trainer_calls(self) -> list[cst.Call]:
        if self._trainers is None:
            self._trainers = [
                c
                for c in self.ctx.nodes(cst.Call)
                if self.imports.resolve(c.func, _TRAINERS) is not None
            ]
        return self._trainers

    def _from_trainer(self, creation: cst.CSTNode) -> RunLength | None:
        trainers = self._trainer_calls()
        if not trainers:
            return None
        holding = [t for t in trainers if self.index.contains(t, creation)]
        trainer = holding[0] if holding else (trainers[0] if len(trainers) == 1 else None)
        if trainer is None:
            return None
        kwargs = {a.keyword.value: a.value for a in trainer.args if a.keyword is not None}
        steps = self._number(kwargs.get("max_steps"))
        if steps is not None and steps > 0:
            return RunLength(steps, f"max_steps={_count(steps)}")
        epochs = self._number(kwargs.get("max_epochs"))
        batches = kwargs.get("limit_train_batches")
        per_epoch = self._number(batches)
        if epochs is None or per_epoch is None or per_epoch <= 1:
            return None
        if isinstance(self.resolver.resolve(batches).value, float):  # type: ignore[union-attr]
            return None  # a fraction of an unknown loader
        accumulate = self._number(kwargs.get("accumulate_grad_batches")) or 1.0
        via = f"max_epochs={_count(epochs)} x limit_train_batches={_count(per_epoch)}"
        if accumulate > 1:
            via += f" / accumulate_grad_batches={_count(accumulate)}"
        return RunLength(epochs * per_epoch / accumulate, via)

    def _number(self, expr: cst.BaseExpression | None) -> float | None:
        if expr is None:
            return None
        value = self.resolver.resolve(expr)
        return None if value is None else value.number

    # mmengine -------------------------------------------------------------------------------
    def _from_mmengine(self) -> RunLength | None:
        # The same for every object of the module: scanned once, not once per object.
        if self._mmengine is False:
            self._mmengine = self._find_mmengine()
        return self._mmengine  # type: ignore[return-value]

    def _find_mmengine(self) -> RunLength | None:
        for statement in self.ctx.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if not (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                    and small.targets[0].target.value == "train_cfg"
                ):
                    continue
                mapping = self.resolver.mapping(small.value)
                if mapping is None:
                    continue
                items = dict(self.resolver.mapping_items(mapping))
                by_epoch = items.get("by_epoch")
                loop_type = self.resolver.resolve(items["type"]) if "type" in items else None
                iter_based = (
                    loop_type is not None and loop_type.value == "IterBasedTrainLoop"
                ) or (
                    by_epoch is not None
                    and self.resolver.resolve(by_epoch) is not None
                    and self.resolver.resolve(by_epoch).value is False
                )  # type: ignore[union-attr]
                iters = self._number(items.get("max_iters"))
                if iter_based and iters is not None and iters > 0:
                    return RunLength(iters, f"train_cfg max_iters={_count(iters)}", "iterations")
        return None

    # Named settings ---------------------------------------------------------------------------
    def _from_names(self) -> RunLength | None:
        if self._named is not False:
            return self._named  # type: ignore[return-value]
        settings = self._settings()
        found: RunLength | None = None
        for name in _STEP_NAMES:
            value = settings.get(name)
            if value is not None and value[0] > 0:
                found = RunLength(value[0], f"{value[1]}={_count(value[0])}")
                break
        if found is None:
            epochs = next((settings[n] for n in _EPOCH_NAMES if n in settings), None)
            per_epoch = next((settings[n] for n in _PER_EPOCH_NAMES if n in settings), None)
            if epochs is not None and per_epoch is not None and epochs[0] > 0 and per_epoch[0] > 0:
                accumulate = next((settings[n] for n in _ACCUMULATION_NAMES if n in settings), None)
                total = epochs[0] * per_epoch[0]
                via = f"{epochs[1]}={_count(epochs[0])} x {per_epoch[1]}={_count(per_epoch[0])}"
                if accumulate is not None and accumulate[0] > 1:
                    total /= accumulate[0]
                    via += f" / {accumulate[1]}={_count(accumulate[0])}"
                found = RunLength(total, via)
        self._named = found
        return found

    def _settings(self) -> dict[str, tuple[float, str]]:
        """Numeric settings by lower-case name: argparse defaults and module constants."""
        found: dict[str, tuple[float, str]] = {}
        conflicts: set[str] = set()

        def put(key: str, number: float | None, shown: str) -> None:
            if number is None:
                return
            key = key.lower()
            if key in found and found[key][0] != number:
                conflicts.add(key)
            found[key] = (number, shown)

        for dest, options in self.resolver.argparse_options().items():
            if len(options) != 1:
                continue
            option = options[0]
            if option.default is None:
                continue
            value = self.resolver.resolve(option.default)
            number = None if value is None else value.number
            if number is None and value is not None and isinstance(value.value, str):
                try:
                    number = float(value.value)
                except ValueError:
                    number = None
            put(dest, number, option.flag)
        for statement in self.ctx.module.body:
            if not isinstance(statement, cst.SimpleStatementLine):
                continue
            for small in statement.body:
                if (
                    isinstance(small, cst.Assign)
                    and len(small.targets) == 1
                    and isinstance(small.targets[0].target, cst.Name)
                ):
                    name = small.targets[0].target.value
                    if name.lower() in (
                        *_STEP_NAMES,
                        *_EPOCH_NAMES,
                        *_PER_EPOCH_NAMES,
                        *_ACCUMULATION_NAMES,
                    ):
                        put(name, self.resolver.number(small.targets[0].target), name)
        if self.index.functions_named("get_config"):
            # ml_collections / jaxline: ``config.training_steps = ...`` in ``get_config()``.
            for name in (*_STEP_NAMES, *_EPOCH_NAMES, *_PER_EPOCH_NAMES, *_ACCUMULATION_NAMES):
                value = self.resolver.config_entry(name)
                if value is not None:
                    put(name, value.number, f"get_config() {name}")
        for key in conflicts:
            found.pop(key, None)
        return found


def _count(value: float) -> str:
    from ema_lint.analysis.objects.horizon import format_count

    return format_count(value)
