"""EMA303: a hand-written EMA update that autograd records (it runs outside no_grad)."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObjects
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import GRAD_METHODS, InPlaceUpdate, InPlaceUpdates
from ..analysis.syntax.names import ImportTable
from ..analysis.syntax.values import ValueResolver
from ..analysis.syntax.vocabulary import is_averaged_name
from ..analysis.training.grad_mode import GradMode
from ..diagnostics import Applicability, Edit, Fix, FixAvailability, FixScope
from ..rule import Rule

# The methods users call from their training step to update an averaging class.
_PUBLIC_UPDATES = frozenset({"update", "step", "update_parameters", "update_ema"})


def _detached(node: cst.BaseExpression) -> bool:
    """``p.data``, ``p.detach()``, ``p.detach().float()``: no autograd history."""
    while True:
        if isinstance(node, cst.Attribute):
            return node.attr.value == "data"
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            method = node.func.attr.value
            if method == "detach":
                return True
            if method in ("float", "to", "clone", "half", "double", "cpu", "cuda"):
                node = node.func.value
                continue
        return False


class UpdateTracksGradients(Rule):
    """
    ## What it finds
    A hand-written in-place update of averaged weights that runs with gradients enabled
    on tensors that require grad: outside ``with torch.no_grad():`` /
    ``torch.inference_mode()`` / ``torch.set_grad_enabled(False)`` and not in a function
    decorated with them, and not through ``.data`` or ``.detach()``, where either the live
    weights are read from ``parameters()`` / ``named_parameters()`` (which require grad) or
    the average is a ``deepcopy`` of the model whose parameters still require grad.

    Helpers are followed to their callers in the module: ``update_ema(ema, model, d)``
    called inside ``with torch.no_grad():`` is fine, called outside it is reported; so are
    methods of EMA classes (``ema.update(model)``), and framework entry points (a module's
    ``forward``, Lightning's ``training_step`` / ``on_train_batch_end``) count as running
    with gradients. A helper that nothing in the file calls is not judged: its callers
    elsewhere may disable gradients. The public update method of an averaging class
    (``update``, ``step``, ``update_parameters`` of ``ExponentialMovingAverage``-like
    classes, or of a class keeping ``self.shadow_params``) is judged all the same: its
    users call it from the training step, where gradients are on, so it must disable them
    itself. A helper argument annotated as ``nn.Parameter``s is read as live weights.

    Silent for updates through ``.data`` / ``.detach()`` (guided-diffusion's
    ``targ.detach().mul_(rate).add_(src, alpha=1 - rate)``), on ``state_dict()`` tensors
    (detached, sharing storage), ``.data =`` assignments, and rebinding a name (EMA301's
    finding). An averaged copy whose parameters are given to an optimizer is EMA206's
    finding; an update that builds an autograd graph because it runs outside ``no_grad``
    is this rule's. A copy made of a model built frozen (``G = build().requires_grad_(False)``,
    then ``G_ema = deepcopy(G)``, as StyleGAN does) is frozen too, and the live weights of
    such a model need grad only where the code switches them on around its backward: an
    update from them is not judged.

    Which updates are judged: those that average *weights* (read from ``parameters()``,
    ``named_parameters()``, ``state_dict()``, ``buffers()``, or written into an averaging
    API's model) and are named as an average: the shadow, its container, or the function or
    class holding the update says ``ema``, ``shadow``, ``teacher`` or ``polyak`` (also
    ``avg``, ``average`` or ``swa`` for a ``deepcopy`` of the model), or is a
    ``*momentum_update*``, ``soft_update``, ``target_net``... Model merging and
    interpolation, optimizer moments, VQ codebooks and loss smoothing are not judged.

    ## Why it hurts training
    Autograd records every operation on a tensor that requires grad. An average that does
    not require grad itself (``deepcopy(model).requires_grad_(False)``, a dict of clones)
    takes a ``grad_fn`` from the live weights at the first update, and each later update
    chains onto the previous one: the graph, and the memory it holds, grows with every
    step until the run slows down or runs out of memory, and a backward pass can reach into
    the average. An average that still requires grad (a plain ``deepcopy``) makes the
    first in-place update raise "a leaf Variable that requires grad is being used in an
    in-place operation".

    ## Example
    ```python
    import copy

    ema = copy.deepcopy(model).requires_grad_(False)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(0.999).add_(p, alpha=0.001)
    ```

    ## Use instead
    ```python
    import copy

    import torch

    ema = copy.deepcopy(model).requires_grad_(False)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.999).add_(p, alpha=0.001)
    ```

    ## Fix
    Safe: the update loop (or the update's statements, when there is no loop) is wrapped in
    ``with torch.no_grad():``, and ``import torch`` is added if the module has no name for
    ``torch.no_grad``. The arithmetic is unchanged; only the recording stops.
    """

    code = "EMA303"
    name = "ema-update-tracks-gradients"
    summary = "Hand-written EMA update recorded by autograd (outside torch.no_grad())"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    # The fix wraps the update's loop (or its statements) in a ``with`` block and may add
    # ``import torch``: it moves code, beyond the statement the finding is reported on.
    fix_scope = FixScope.MOVES
    triggers = UPDATE_EVIDENCE.triggers
    trigger_groups = UPDATE_EVIDENCE.groups
    requires = (InPlaceUpdates, AveragingObjects, GradMode, ImportTable)

    def finish(self) -> None:
        provider = self.ctx.get(InPlaceUpdates)
        if not provider.updates:
            return
        objects = self.ctx.get(AveragingObjects)
        found: list[tuple[InPlaceUpdate, str]] = []
        for update in provider.updates:
            if not self._persists(update, provider):
                continue
            if not objects.averages_weights(update):
                continue
            kind = self._tracked(update, objects)
            if kind is None:
                continue
            records = self.ctx.get(GradMode).records(update.node)
            if records is None and self._public_update(update):
                records = True
            if records is not True:
                continue
            found.append((update, kind))
        groups = self._groups([self._unit(update, provider) for update, _ in found])
        for update, kind in found:
            unit = self._unit(update, provider)
            group = next((g for g in groups if unit and unit[0] in g), [])
            self.report(update.node, self._message(update, kind, objects), self._fix(group))

    # Judging -----------------------------------------------------------------------------------
    def _persists(self, update: InPlaceUpdate, provider: InPlaceUpdates) -> bool:
        """The result stays in the average: not a rebound name (a fresh tensor each step,
        nothing chains), not a ``.data`` write, not a discarded ``state_dict()`` entry."""
        node = update.node
        if update.form in ("tree_map", "returned", "avg_fn") or update.dropped:
            return False  # a new value (a JAX tree, a returned tensor), nothing in place
        if isinstance(node, cst.Assign):
            target = node.targets[0].target
            if isinstance(target, cst.Name):
                return False
            if isinstance(target, cst.Attribute) and target.attr.value == "data":
                return False
            return provider.discarded(update) is None
        return True

    def _public_update(self, update: InPlaceUpdate) -> bool:
        """The update is the body of an averaging class's public update method
        (``ExponentialMovingAverage.update(self, parameters)``), called by users from their
        training step, where gradients are on: the method must disable them itself."""
        function = self.ctx.index.enclosing(update.node, cst.FunctionDef)
        if function is None or function.name.value not in _PUBLIC_UPDATES:
            return False
        owner = self.ctx.index.enclosing(function, cst.ClassDef, cst.FunctionDef)
        if not isinstance(owner, cst.ClassDef):
            return False
        return is_averaged_name(owner.name.value) or is_averaged_name(
            self.ctx.code(update.shadow_container or update.shadow)
        )

    def _elements_detached(self, expr: cst.BaseExpression | None) -> bool:
        """A list whose elements are ``p.data`` / ``p.detach()`` (for ``_foreach`` updates)."""
        if expr is None:
            return False
        if _detached(expr):
            return True
        value = self.ctx.get(ValueResolver).assigned_value(expr)
        if isinstance(value, (cst.ListComp, cst.GeneratorExp)):
            return _detached(value.elt)
        return False

    def _tracked(self, update: InPlaceUpdate, objects: AveragingObjects) -> str | None:
        """ "raises" (the average requires grad), "graph" (the live weights do), or None."""
        if self._elements_detached(update.shadow):
            return None
        obj = objects.of_update(update)
        if (
            update.shadow_method in GRAD_METHODS
            and obj is not None
            and objects.parameters_frozen(obj) is False
            and not isinstance(update.node, cst.Assign)
        ):
            return "raises"
        if update.source_method in GRAD_METHODS and not self._elements_detached(update.source):
            if self._source_built_frozen(update, objects):
                return None  # frozen by default, switched on only around its backward
            return "graph"
        return None

    def _source_built_frozen(self, update: InPlaceUpdate, objects: AveragingObjects) -> bool:
        model = update.source_container
        if model is None and update.source is not None:
            model, _ = self.ctx.get(InPlaceUpdates).container(update.source)
        return model is not None and objects.built_frozen(model) is not None

    def _message(self, update: InPlaceUpdate, kind: str, objects: AveragingObjects) -> str:
        averaged = objects.shadow_name(update)
        if kind == "raises":
            return (
                f"{averaged}'s parameters still require grad and are updated in place outside "
                "torch.no_grad(): the first update raises 'a leaf Variable that requires grad "
                "is being used in an in-place operation'; run the update under "
                "`with torch.no_grad():`"
            )
        source = self.ctx.code(update.source) if update.source is not None else "the weights"
        return (
            f"{averaged} is updated outside torch.no_grad() from {source}, which requires "
            f"grad: autograd records the update, so {averaged}'s tensors join the graph and "
            "each step chains onto the last (memory and time grow every step); run the "
            "update under `with torch.no_grad():`"
        )

    # Fix ----------------------------------------------------------------------------------------
    def _unit(self, update: InPlaceUpdate, provider: InPlaceUpdates) -> list[cst.CSTNode]:
        """The statements to wrap for one update: its loop, or its own statements."""
        if update.loop is not None:
            return [update.loop]
        statements = provider.statements(update)
        return statements if statements and self._adjacent(statements) else []

    def _groups(self, units: list[list[cst.CSTNode]]) -> list[list[cst.CSTNode]]:
        """Units that follow each other in one block, merged: one ``with`` around them."""
        groups: list[list[cst.CSTNode]] = []
        for unit in sorted((u for u in units if u), key=lambda u: self.ctx.index.order[id(u[0])]):
            if groups and any(unit[0] is s for s in groups[-1]):
                continue
            if groups and self._adjacent([*groups[-1], *unit]):
                groups[-1].extend(s for s in unit if all(s is not t for t in groups[-1]))
            else:
                groups.append(list(unit))
        return groups

    def _fix(self, statements: list[cst.CSTNode]) -> Fix | None:
        if not statements:
            return None
        imports = self.ctx.get(ImportTable)
        reference = imports.local_reference("torch.no_grad")
        edits: list[Edit] = []
        if reference is None:
            reference = "torch.no_grad"
            edits.append(Edit.add_import("torch"))
        first = statements[0]
        assert isinstance(first, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
        block = cst.With(
            items=[cst.WithItem(cst.parse_expression(f"{reference}()"))],
            body=cst.IndentedBlock(
                body=[first.with_changes(leading_lines=[]), *statements[1:]]  # type: ignore[list-item]
            ),
            leading_lines=first.leading_lines,
        )
        edits.append(Edit.replace(first, block))
        edits.extend(Edit.remove(s, moved=True) for s in statements[1:])
        return Fix.safe("Run the update under torch.no_grad()", *edits)

    def _adjacent(self, statements: list[cst.CSTNode]) -> bool:
        block = self.ctx.parent(statements[0])
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)):
            return False
        items = list(body)
        if any(s not in items for s in statements):
            return False
        positions = [items.index(s) for s in statements]
        return positions == list(range(positions[0], positions[0] + len(positions)))
