"""EMA301: a hand-written EMA update whose result is bound to a name, not written in place."""

from __future__ import annotations

import libcst as cst

from ..analysis.objects.averaging import AveragingObjects
from ..analysis.objects.copies import LoopRebind, NoOpCopies
from ..analysis.objects.triggers import UPDATE_EVIDENCE
from ..analysis.objects.updates import InPlaceUpdate, InPlaceUpdates
from ..analysis.syntax.names import dotted_name
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule


class UpdateNotInPlace(Rule):
    """
    ## What it finds
    A hand-written update of averaged weights whose result is bound to a name instead of
    being written into the averaged tensors:

    - ``e = decay * e + (1 - decay) * p`` or ``e = e.lerp(p, 1 - decay)`` where ``e`` is the
      loop variable of ``for e, p in zip(ema.parameters(), model.parameters())`` (or of a
      loop over ``named_parameters()`` / ``state_dict().values()``);
    - the same on a local name bound from the average (``s = ema_sd[name]``) or on a
      parameter of the update function, when nothing reads the name afterwards;
    - ``sd[k] = ...`` where ``sd = ema.state_dict()`` (or ``dict(ema.named_parameters())``)
      and the dict is never loaded back (``load_state_dict``), saved or passed on;
    - the out-of-place spellings of the in-place forms bound to the loop variable
      (``e = e.mul(d).add(p, alpha=1 - d)``, ``e = e.sub((1 - d) * (e - p))``), and the
      difference form written as arithmetic (``e = e - (1 - d) * (e - p)``, ``e = e + (1 -
      d) * (p - e)``), also in a helper given the two sequences (``def
      update_ema(target_params, source_params, rate)``);
    - an out-of-place head in a chain of in-place calls: ``e.mul(d).add_(p, alpha=1 -
      d)`` as a statement (``add_`` updates the product, a temporary the statement drops);
    - an out-of-place average as a bare statement, whose result nothing keeps:
      ``e.lerp(p, 1 - d)``, ``torch.lerp(e, p, w)`` without ``out=``, ``e.sub((1 - d) * (e
      - p))``, ``e.mul(d).add(p, alpha=1 - d)``; also ``e.mul_(d).add(p, alpha=1 - d)``,
      whose scaling lands in the average and whose sum is dropped (the average then decays
      toward zero instead of following the model);
    - a two-statement update with one half rebinding the loop variable: ``e = e * d`` then
      ``e += (1 - d) * p`` (the second half then updates the temporary), or ``e *= d`` then
      ``e = e + (1 - d) * p``; also the running mean of SWA written as two halves
      (``e = e.add(-k * e)`` then ``e.add_(k * p)``, or the other half rebound).

    - a copy that copies nothing: ``p = e`` (or ``e.clone()``, ``e.data``) in ``for p, e
      in zip(params, ema_params):`` where nothing reads ``p`` afterwards, meant to start
      the average from the model's weights (also over named pairs, ``for (n, e), (_, p) in
      zip(...)``); ``ema_sd[k] = v.clone()`` where ``ema_sd = ema.state_dict()`` is never
      loaded back (the entry is replaced in a temporary dict, no tensor changes); and
      ``ema.state_dict(model.state_dict())``,
      which passes the model's weights as the *destination* of ``state_dict`` and loads
      nothing (``load_state_dict`` was meant).

    The update is recognised by its arithmetic (a combination of the averaged tensor and a
    live one, or a ``lerp``), whatever the names, also through a temporary
    (``t = d * e + (1 - d) * p`` then ``e = t``). Silent for the forms that do write the
    average: in-place calls (``mul_``/``add_``/``lerp_``/``copy_``), ``e.data = ...``,
    entries of a dict that *is* the average (``shadow = {k: v.clone() ...}``), a
    ``state_dict()`` dict that is loaded back, and a name that is read afterwards (returned,
    appended, written back).

    Which updates are judged: those that average *weights* (read from ``parameters()``,
    ``named_parameters()``, ``state_dict()``, ``buffers()``, or written into an averaging
    API's model) and are named as an average: the shadow, its container, or the function or
    class holding the update says ``ema``, ``shadow``, ``teacher`` or ``polyak`` (also
    ``avg``, ``average`` or ``swa`` for a ``deepcopy`` of the model), or is a
    ``*momentum_update*``, ``soft_update``, ``target_net``...; a helper over two sequences
    also when its parameters say which is the average (``target``/``source``,
    ``average``/``current``) or every call hands it an averaged copy's weights from inside a
    loop; with neutral names too, when its arithmetic moves the first sequence toward the
    second by a weight and its complement and every call hands it a ``deepcopy`` of the
    model a loop trains and that model, once per training step (``step(twin.parameters(),
    net.parameters(), 0.999)`` with ``twin = copy.deepcopy(net)``). Model merging and
    interpolation, optimizer moments, VQ codebooks and loss smoothing are not judged.

    ## Why it hurts training
    Assigning to a name makes it point to a new tensor; the tensor inside the averaged model
    is untouched. The loop computes the average and throws it away at every step, so the
    "EMA" model keeps its initial weights for the whole run (usually a copy of the
    untrained model) and evaluating or exporting it gives a model that never learned.
    Nothing fails: the update runs, it just updates nothing.

    ## Example
    ```python
    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay):
        for e, p in zip(ema_model.parameters(), model.parameters()):
            e = decay * e + (1 - decay) * p
    ```

    ## Use instead
    ```python
    import torch


    @torch.no_grad()
    def update_ema(ema_model, model, decay):
        for e, p in zip(ema_model.parameters(), model.parameters()):
            e.copy_(decay * e + (1 - decay) * p)
    ```

    The same holds for the copy that starts the average: after ``p = e`` in the loop, the
    averaged model keeps its own random initialisation, so the average starts from weights
    that were never trained and that no later update fully forgets with a long horizon.

    ## Fix
    No fix for a rebinding copy: which side should be copied into which is the author's
    call (``e.copy_(p)`` to start the average from the model). ``ema.state_dict(X)``
    becomes ``ema.load_state_dict(X)`` (safe). Otherwise safe: the assignment becomes the
    in-place equivalent with the same arithmetic,
    ``e.copy_(<expression>)`` (``sd[k].copy_(<expression>)`` for a ``state_dict()`` entry,
    whose tensors share storage with the model's), or ``e.lerp_(p, w)`` for
    ``e = e.lerp(p, w)``; a bare statement gets the in-place methods (``e.lerp_(p, w)``,
    ``e.mul_(d).add_(p, alpha=1 - d)``) or ``out=e`` for ``torch.lerp``. If the update
    runs outside ``torch.no_grad()``, EMA303 then reports it (an in-place update there is
    recorded by autograd) and its fix adds the ``no_grad`` block.
    """

    code = "EMA301"
    name = "ema-update-not-in-place"
    summary = "Hand-written EMA update bound to a name, so the averaged weights never change"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = UPDATE_EVIDENCE.triggers
    trigger_groups = UPDATE_EVIDENCE.groups
    requires = (InPlaceUpdates, AveragingObjects, NoOpCopies)

    def finish(self) -> None:
        self._no_op_copies()
        self._out_of_place_heads()
        self._dropped()
        if not self.ctx.nodes(cst.Assign):
            return
        updates = self.ctx.get(InPlaceUpdates)
        candidates = [u for u in updates.updates if updates.rebinding(u) is not None]
        if not candidates:
            return
        objects = self.ctx.get(AveragingObjects)
        for update in candidates:
            why = updates.discarded(update)
            if why is None or not objects.averages_weights(update):
                continue
            assign = updates.rebinding(update)
            assert assign is not None
            self.report(
                assign,
                self._message(update, assign, why, objects),
                self._fix(assign),
            )

    def _out_of_place_heads(self) -> None:
        """``e.mul(d).add_(p, alpha=1 - d)``: the ``add_`` updates the product, a new tensor
        the statement then drops; ``mul_`` was meant."""
        updates = self.ctx.get(InPlaceUpdates)
        heads = [u for u in updates.updates if u.head is not None]
        if not heads:
            return
        objects = self.ctx.get(AveragingObjects)
        for update in heads:
            head = update.head
            assert head is not None and isinstance(head.func, cst.Attribute)
            if not objects.averages_weights(update):
                continue
            shadow = self.ctx.code(head.func.value)
            averaged = objects.shadow_name(update)
            self.report(
                update.node,
                f"`{shadow}.mul(...)` makes a new tensor, and the in-place rest of the "
                f"statement updates that temporary, which is then dropped: {averaged}'s "
                f"weights never change and the averaged model stays at its initial weights; "
                f"scale in place ({shadow}.mul_(...))",
                Fix.safe(
                    "Scale in place with mul_", Edit.replace(head.func.attr, cst.Name("mul_"))
                ),
            )

    def _dropped(self) -> None:
        """``e.lerp(p, w)``, ``torch.lerp(e, p, w)``, ``e.sub(k * (e - p))``,
        ``e.mul(d).add(p, alpha=1 - d)`` as a bare statement: the average is computed into
        a new tensor that nothing keeps; the in-place spelling was meant."""
        updates = self.ctx.get(InPlaceUpdates)
        dropped = [u for u in updates.updates if u.dropped]
        if not dropped:
            return
        objects = self.ctx.get(AveragingObjects)
        for update in dropped:
            call = update.node
            assert isinstance(call, cst.Call)
            if not objects.averages_weights(update):
                continue
            shadow = self.ctx.code(update.shadow)
            averaged = objects.shadow_name(update)
            statement = self.ctx.code(call).strip()
            if len(statement) > 60:
                statement = statement[:57] + "..."
            outcome = "weights never change and the averaged model stays at its initial weights"
            if isinstance(call.func, cst.Attribute) and call.func.attr.value != "lerp":
                methods = _chain_methods(call)
                spelling = ".".join(f"{m.rstrip('_')}_(...)" for m in methods)
                fix = Fix.safe(
                    "Update in place",
                    *(
                        Edit.replace(c.func.attr, cst.Name(c.func.attr.value + "_"))
                        for c in _chain(call)
                        if not c.func.attr.value.endswith("_")  # type: ignore[union-attr]
                    ),
                )
                advice = f"{shadow}.{spelling}"
                if methods[0].endswith("_"):
                    # ``e.mul_(d).add(p, ...)``: the scaling is kept, the model's share is not.
                    outcome = (
                        "weights are scaled by the decay at every update and never receive "
                        "the model's share, so the averaged model shrinks toward zero"
                    )
            elif isinstance(call.func, cst.Attribute) and not _is_torch_lerp(call):
                fix = Fix.safe(
                    "Update in place with lerp_", Edit.replace(call.func.attr, cst.Name("lerp_"))
                )
                advice = f"{shadow}.lerp_(...)"
            else:
                out = cst.Arg(
                    update.shadow,
                    keyword=cst.Name("out"),
                    equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""),
                        whitespace_after=cst.SimpleWhitespace(""),
                    ),
                )
                fix = Fix.safe(
                    "Write the result into the average with out=",
                    Edit.replace(call, call.with_changes(args=[*call.args, out])),
                )
                advice = f"out={shadow}"
            self.report(
                call,
                f"`{statement}` computes the average into a new tensor and the statement "
                f"drops it: {averaged}'s {outcome}; update the tensor in place ({advice})",
                fix,
            )

    def _no_op_copies(self) -> None:
        copies = self.ctx.get(NoOpCopies)
        for rebind in copies.rebinds:
            self.report(rebind.assign, _rebind_message(rebind, self.ctx.code(rebind.assign)))
        for assign in copies.entry_copies:
            target = assign.targets[0].target
            assert isinstance(target, cst.Subscript)
            entry = self.ctx.code(target)
            base = self.ctx.code(target.value)
            self.report(
                assign,
                f"`{self.ctx.code(assign).strip()}` replaces an entry of {base}, a dict made "
                f"by state_dict() that is never loaded back: no tensor is copied, so the "
                f"average keeps its own weights instead of the model's; copy into the tensor "
                f"({entry}.copy_(...)) or load the dict (load_state_dict({base}))",
            )
        for call in copies.state_dict_loads:
            func = call.func
            assert isinstance(func, cst.Attribute)
            receiver = self.ctx.code(func.value)
            self.report(
                call,
                f"`{receiver}.state_dict(...)` loads nothing: its first argument is the "
                f"destination dict, so {receiver}'s tensors are written into a temporary "
                f"dict and thrown away; load the weights with {receiver}.load_state_dict(...)",
                Fix.safe(
                    "Call load_state_dict",
                    Edit.replace(func.attr, cst.Name("load_state_dict")),
                ),
            )

    def _message(
        self, update: InPlaceUpdate, assign: cst.Assign, why: str, objects: AveragingObjects
    ) -> str:
        target = self.ctx.code(assign.targets[0].target)
        averaged = objects.shadow_name(update)
        if why == "state_dict":
            base = assign.targets[0].target
            assert isinstance(base, cst.Subscript)
            method = update.shadow_method or "state_dict"
            return (
                f"`{target} = ...` replaces an entry of a dict made from {averaged}'s "
                f"{method}(), which is never loaded back: {averaged}'s tensors never change, "
                f"so the average stays at its initial weights; write into the tensor "
                f"({target}.copy_(...))"
            )
        what = "the loop variable" if why == "loop variable" else "the local name"
        after = "" if why == "loop variable" else ", which nothing reads afterwards"
        if update.rebind is not None:
            rest = self.ctx.code(update.node).strip()
            return (
                f"`{target} = ...` rebinds {what} {target} to a new tensor{after}, so the "
                f"next statement (`{rest}`) updates that temporary: the average is computed "
                f"and thrown away, {averaged}'s weights never change and the averaged model "
                f"stays at its initial weights; update the tensor in place "
                f"({_in_place_spelling(target, assign.value)})"
            )
        return (
            f"`{target} = ...` rebinds {what} {target} to a new tensor{after}: the average is "
            f"computed and thrown away, so {averaged}'s weights never change and the averaged "
            f"model stays at its initial weights; update the tensor in place "
            f"({self._suggestion(assign)})"
        )

    def _suggestion(self, assign: cst.Assign) -> str:
        target = self.ctx.code(assign.targets[0].target)
        lerp = _self_lerp(assign)
        if lerp is not None:
            return f"{target}.lerp_(...)"
        return f"{target}.copy_(...)"

    def _fix(self, assign: cst.Assign) -> Fix:
        target = assign.targets[0].target
        lerp = _self_lerp(assign)
        if lerp is not None:
            call = cst.Call(cst.Attribute(target, cst.Name("lerp_")), lerp.args)
            title = "Update in place with lerp_"
        else:
            call = _call_with(target, "copy_", assign.value)
            title = "Update in place with copy_"
        return Fix.safe(title, Edit.replace(assign, cst.Expr(call, semicolon=assign.semicolon)))


def _chain(call: cst.Call) -> list[cst.Call]:
    """``e.mul(d).add(p)`` -> [the ``add`` call, the ``mul`` call]."""
    found: list[cst.Call] = []
    node: cst.BaseExpression = call
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        found.append(node)
        node = node.func.value
    return found


def _chain_methods(call: cst.Call) -> list[str]:
    return [c.func.attr.value for c in reversed(_chain(call))]  # type: ignore[union-attr]


def _is_torch_lerp(call: cst.Call) -> bool:
    return dotted_name(call.func) == "torch.lerp"


def _call_with(
    target: cst.BaseAssignTargetExpression, method: str, value: cst.BaseExpression
) -> cst.Call:
    """``target.method(value)``; the value's outer parentheses become the call's, with the
    line breaks and comments they held."""
    func = cst.Attribute(target, cst.Name(method))  # type: ignore[arg-type]
    if not value.lpar:  # type: ignore[attr-defined]
        return cst.Call(func, [cst.Arg(value)])
    lpar, rpar = value.lpar[0], value.rpar[-1]  # type: ignore[attr-defined]
    inner = value.with_changes(lpar=value.lpar[1:], rpar=value.rpar[:-1])  # type: ignore[attr-defined]
    return cst.Call(
        func,
        [cst.Arg(inner, whitespace_after_arg=rpar.whitespace_before)],
        whitespace_before_args=lpar.whitespace_after,
    )


def _self_lerp(assign: cst.Assign) -> cst.Call | None:
    """``e = e.lerp(p, w)``: the call, when its receiver is the assigned name itself."""
    value = assign.value
    target = assign.targets[0].target
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "lerp"
        and value.func.value.deep_equals(target)
    ):
        return value
    return None


def _rebind_message(rebind: LoopRebind, code: str) -> str:
    return (
        f"`{code.strip()}` rebinds the loop variable {rebind.target}: no "
        f"tensor is copied, so the average starts from its own initial weights instead of "
        f"the model's; copy in place ({rebind.source}.copy_({rebind.target}) or "
        f"{rebind.target}.copy_({rebind.source}), whichever side is the average)"
    )


def _in_place_spelling(target: str, value: cst.BaseExpression) -> str:
    """How the first half of a two-statement update is written in place: ``e.add(x)`` ->
    ``e.add_(...)``; a product -> ``e.mul_(...)`` or ``e *= ...``."""
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        method = value.func.attr.value.rstrip("_")
        if method in ("add", "sub", "mul"):
            return f"{target}.{method}_(...)"
    return f"{target}.mul_(...) or {target} *= ..."
