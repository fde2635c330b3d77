"""The loops over batches a loop runs, what they iterate and where they move the batches.

An SWA average is updated once per epoch in the epoch loop, while the batches are read in
an inner loop, often in another function (``train_one_epoch(model, train_loader, device)``).
Recalibrating BatchNorm afterwards (``update_bn(loader, swa_model, device=...)``) needs
that loader and that device, spelled where the epoch loop is. This provider finds the batch
loops (the innermost training loops of ``TrainingLoops``) one iteration of a loop runs,
directly or through the module's functions, with the calls leading to them, the loader each
iterates (unwrapped from ``enumerate``/``tqdm``), how a batch is shaped (a tuple whose first
item is the input, a single tensor, or a mapping), and the device batches are moved to.
``Origins.lift_through(expr, chain)`` spells any of them in the outer function.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.values import Symbol, ValueResolver
from ema_lint.analysis.training.loops import Loop, TrainingLoops

_WRAPPERS = {"enumerate", "tqdm", "iter", "islice", "progress_bar", "track", "auto"}
_MAPPING_METHODS = {"items", "keys", "values", "get"}


class BatchShape(str, enum.Enum):
    SEQUENCE = "sequence"  # (input, target, ...): the first item is the input
    SINGLE = "single"  # the batch is the input
    MAPPING = "mapping"  # {"image": ..., "label": ...}
    UNKNOWN = "unknown"  # an object read by attribute, or not seen


@dataclass(frozen=True, eq=False)
class BatchLoop:
    """A loop over batches, as run from one iteration of another loop."""

    loop: cst.For
    # Calls from the asking loop's function down to the function holding ``loop``.
    chain: tuple[cst.Call, ...]
    # What it iterates, unwrapped, as written in its own function (None: not a loader).
    loader: cst.BaseExpression | None
    # How many loaders it iterates together (``zip(labeled, unlabeled)``: 2).
    loaders: int
    shape: BatchShape
    # Where batches are moved (``x.to(device)``), in its own function; for ``.cuda()`` the
    # expression is None and ``cuda`` is True.
    device: cst.BaseExpression | None = None
    cuda: bool = False


class BatchLoops:
    """Batch loops run by the loops of one module."""

    MAX_DEPTH = 3

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.loops = ctx.get(TrainingLoops)
        self._made: dict[int, BatchLoop] = {}
        self._batch: dict[int, bool] = {}
        self._holders: set[int] | None = None

    @classmethod
    def build(cls, ctx: FileContext) -> BatchLoops:
        return cls(ctx)

    def run_by(self, loop: Loop) -> list[BatchLoop]:
        """The batch loops one iteration of ``loop`` runs (``loop`` itself if it is one)."""
        found: list[BatchLoop] = []
        seen: set[int] = set()
        if self.is_batch_loop(loop):
            return [self._batch_loop(loop, ())] if isinstance(loop, cst.For) else []
        self._collect(loop, (), found, seen, 0)
        return found

    def _collect(
        self,
        scope: cst.CSTNode,
        chain: tuple[cst.Call, ...],
        found: list[BatchLoop],
        seen: set[int],
        depth: int,
    ) -> None:
        fn = self.loops.function_of(scope) if not isinstance(scope, cst.FunctionDef) else scope
        for step_loop in self.loops.train_loops:
            if (
                isinstance(step_loop, cst.For)
                and step_loop is not scope
                and id(step_loop) not in seen
                and self.index.contains(scope, step_loop)
                and self.is_batch_loop(step_loop)
            ):
                seen.add(id(step_loop))
                found.append(self._batch_loop(step_loop, chain))
        if depth >= self.MAX_DEPTH:
            return
        for call in self.loops.calls_in(fn):
            if not self.index.contains(scope, call):
                continue
            for target in self.loops.local_targets(call):
                if id(target) in seen:
                    continue
                seen.add(id(target))
                self._collect(target, (*chain, call), found, seen, depth + 1)

    def is_batch_loop(self, loop: Loop) -> bool:
        """A training loop that runs no other training loop, here or through calls (an epoch
        loop calling ``train_one_epoch()`` trains, but over epochs)."""
        if not any(loop is t for t in self.loops.train_loops):
            return False
        key = id(loop)
        if key not in self._batch:
            self._batch[key] = not self._runs_train_loop(loop, 0, set())
        return self._batch[key]

    def _holding_train_loops(self) -> set[int]:
        """Ids of the nodes that hold a training loop (its ancestors), computed once."""
        if self._holders is None:
            self._holders = set()
            for loop in self.loops.train_loops:
                self._holders.update(id(a) for a in self.index.ancestors(loop))
        return self._holders

    def _runs_train_loop(self, scope: cst.CSTNode, depth: int, seen: set[int]) -> bool:
        if id(scope) in self._holding_train_loops():
            return True
        if depth >= self.MAX_DEPTH:
            return False
        fn = self.loops.function_of(scope) if not isinstance(scope, cst.FunctionDef) else scope
        for call in self.loops.calls_in(fn):
            if not self.index.contains(scope, call):
                continue
            for target in self.loops.local_targets(call):
                if id(target) not in seen:
                    seen.add(id(target))
                    if self._runs_train_loop(target, depth + 1, seen):
                        return True
        return False

    # One batch loop ----------------------------------------------------------------------------
    def _batch_loop(self, loop: cst.For, chain: tuple[cst.Call, ...]) -> BatchLoop:
        made = self._made.get(id(loop))
        if made is not None and made.chain == chain:
            return made
        loader, count, target = self._iterable(loop)
        names = self._batch_names(loop, target)
        shape = self._shape(loop, target)
        device, cuda = self._device(loop, names)
        made = BatchLoop(loop, chain, loader, count, shape, device, cuda)
        self._made[id(loop)] = made
        return made

    def _iterable(
        self, loop: cst.For
    ) -> tuple[cst.BaseExpression | None, int, cst.BaseExpression | None]:
        """(loader, number of loaders, the loop target that receives one batch)."""
        node: cst.BaseExpression = loop.iter
        target: cst.BaseExpression | None = loop.target
        while isinstance(node, cst.Call) and node.args:
            name = _last_name(node.func)
            if name == "enumerate" and isinstance(target, (cst.Tuple, cst.List)):
                elements = target.elements
                target = elements[1].value if len(elements) == 2 else None
            elif name not in _WRAPPERS:
                break
            node = node.args[0].value
        if isinstance(node, cst.Call) and _last_name(node.func) == "zip":
            return (node.args[0].value if node.args else None), len(node.args), None
        if isinstance(node, cst.Call) and _last_name(node.func) in ("range", "count"):
            return None, 0, target
        return node, 1, target

    def _batch_names(self, loop: cst.For, target: cst.BaseExpression | None) -> set[str]:
        """Names that hold a batch or a part of one inside the loop body."""
        names = {n.value for n in _names(target, self.index)} if target is not None else set()
        if not names:
            return names
        for _ in range(2):
            for assign in self.index.descendants(loop.body, cst.Assign):
                assert isinstance(assign, cst.Assign)
                read = {n.value for n in _names(assign.value, self.index)}
                if read & names:
                    for t in assign.targets:
                        names.update(n.value for n in _names(t.target, self.index))
        return names

    def _shape(self, loop: cst.For, target: cst.BaseExpression | None) -> BatchShape:
        if isinstance(target, (cst.Tuple, cst.List)):
            return BatchShape.SEQUENCE
        if not isinstance(target, cst.Name):
            return BatchShape.UNKNOWN
        name = target.value
        shape = BatchShape.SINGLE
        for node in self.index.descendants(loop.body, (cst.Subscript, cst.Attribute, cst.Arg)):
            if isinstance(node, cst.Arg):
                if node.star == "**" and _is_name(node.value, name):
                    return BatchShape.MAPPING
                continue
            if not _is_name(node.value, name):  # type: ignore[attr-defined]
                continue
            if isinstance(node, cst.Subscript):
                index = node.slice[0].slice if node.slice else None
                value = index.value if isinstance(index, cst.Index) else None
                if isinstance(
                    value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)
                ):
                    return BatchShape.MAPPING
                shape = BatchShape.SEQUENCE
            elif isinstance(node, cst.Attribute):
                if node.attr.value in _MAPPING_METHODS:
                    return BatchShape.MAPPING
                if node.attr.value not in ("to", "cuda", "float", "half", "size", "shape"):
                    shape = BatchShape.UNKNOWN
        for assign in self.index.descendants(loop.body, cst.Assign):
            assert isinstance(assign, cst.Assign)
            if _is_name(assign.value, name) and any(
                isinstance(t.target, (cst.Tuple, cst.List)) for t in assign.targets
            ):
                shape = BatchShape.SEQUENCE
        return shape

    def _device(self, loop: cst.For, names: set[str]) -> tuple[cst.BaseExpression | None, bool]:
        resolver = self.ctx.get(ValueResolver)
        for call in self.index.descendants(loop.body, cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value in ("to", "cuda")):
                continue
            root = _root_name(func.value)
            if root is None or root not in names:
                continue
            if func.attr.value == "cuda":
                positional = [a for a in call.args if a.keyword is None and not a.star]
                return (positional[0].value, False) if positional else (None, True)
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value == "device":
                    return arg.value, False
            for arg in call.args:
                if arg.keyword is None and not arg.star and not _is_dtype(arg.value, resolver):
                    return arg.value, False
                break
        return None, False


def _last_name(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def _is_name(node: cst.CSTNode, name: str) -> bool:
    return isinstance(node, cst.Name) and node.value == name


def _root_name(node: cst.BaseExpression) -> str | None:
    while isinstance(node, (cst.Attribute, cst.Subscript)):
        node = node.value
    return node.value if isinstance(node, cst.Name) else None


def _names(node: cst.CSTNode, index) -> Iterator[cst.Name]:
    if isinstance(node, cst.Name):
        yield node
        return
    for name in index.descendants(node, cst.Name):
        parent = index.parent(name)
        if isinstance(parent, cst.Attribute) and parent.attr is name:
            continue
        yield name


def _is_dtype(node: cst.BaseExpression, resolver: ValueResolver) -> bool:
    value = resolver.resolve(node)
    if value is None:
        return False
    if isinstance(value.value, Symbol):
        last = value.value.qualname.rsplit(".", 1)[-1]
        return last.startswith(("float", "int", "bfloat", "half", "double", "bool", "uint"))
    return False
