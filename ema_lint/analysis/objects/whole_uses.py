"""Where an averaged copy is used as a whole model: run, evaluated, saved or returned.

An update that leaves some entries of the copy behind (the buffers, the biases a name
filter skips) matters only if the copy is then used whole: called (``ema(x)``), put in
``eval()``, given to another function (``validate(ema, loader)``), saved (``state_dict()``,
``save_pretrained``), sampled from, or returned from the function that trains it. This
provider finds the first such use of each averaging object outside its creation and its own
updates (the calls inside the update loop, ``deepcopy``, ``zip``, ``list`` and the module's
update helpers are not uses), and says what it is, for messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.averaging import AveragingObject, AveragingObjects
from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import dotted_name

# Methods of the copy that run, evaluate, export or sample with it as a whole.
USE_METHODS = frozenset(
    {"eval", "forward", "state_dict", "predict", "generate", "sample", "save_pretrained"}
)
_NOT_USES = frozenset({"deepcopy", "zip", "list", "id", "len", "isinstance", "print", "getattr"})


@dataclass(frozen=True, eq=False)
class WholeUse:
    """A use of the copy as a whole model."""

    node: cst.CSTNode  # the call or the ``return``
    what: str  # "called", "eval", "passed", "saved", "returned", "method"


class WholeUses:
    """The uses of each averaging object as a whole model."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.objects = ctx.get(AveragingObjects)
        self._mentioning: dict[int, list[cst.Call]] | None = None
        self._memo: dict[int, WholeUse | None] = {}

    @classmethod
    def build(cls, ctx: FileContext) -> WholeUses:
        return cls(ctx)

    def first(self, obj: AveragingObject, *, returned: bool = False) -> WholeUse | None:
        """The first use of ``obj`` as a whole model (a ``return`` of it counts only when
        ``returned``), or None when the module shows none."""
        key = id(obj) * 2 + int(returned)
        if key not in self._memo:
            self._memo[key] = self._first(obj, returned)
        return self._memo[key]

    def _first(self, obj: AveragingObject, returned: bool) -> WholeUse | None:
        index = self.index
        objects = self.objects
        helpers = {
            fn.name.value
            for u in obj.inplace
            if isinstance(fn := index.enclosing(u.node, cst.FunctionDef), cst.FunctionDef)
        }
        for call in self._calls_mentioning().get(id(obj), []):
            if index.contains(obj.creation, call) or any(
                index.contains(u.loop or u.node, call) for u in obj.inplace
            ):
                continue
            func = call.func
            if isinstance(func, (cst.Name, cst.Attribute)) and objects.for_expression(func) is obj:
                return WholeUse(call, "called")
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in USE_METHODS
                and objects.for_expression(func.value) is obj
            ):
                what = {"eval": "eval", "state_dict": "saved", "save_pretrained": "saved"}
                return WholeUse(call, what.get(func.attr.value, "method"))
            name = (dotted_name(func) or "").rsplit(".", 1)[-1]
            if name in helpers or name in _NOT_USES:
                continue
            if any(objects.for_expression(a.value) is obj for a in call.args):
                return WholeUse(call, "passed")
        if returned:
            for ret in self.ctx.nodes(cst.Return):
                assert isinstance(ret, cst.Return)
                value = ret.value
                if value is None or any(index.contains(u.node, ret) for u in obj.inplace):
                    continue
                if index.enclosing(ret, cst.FunctionDef) in [
                    index.enclosing(u.node, cst.FunctionDef) for u in obj.inplace
                ]:
                    continue  # an update helper handing its copy back
                if objects.for_expression(value) is obj:
                    return WholeUse(ret, "returned")
        return None

    def parts_only(self, obj: AveragingObject) -> bool:
        """The module refers to ``obj`` outside its creation and its own updates, and every
        such reference is to a part of it: an item (``ema[0]``) or a sub-module
        (``ema.backbone``), never the copy itself (called, handed on, returned) nor one of
        its methods (``ema.state_dict()``). Its ``eval()`` at creation then says nothing
        about using it whole."""
        index, objects = self.index, self.objects
        statement = index.statement(obj.creation) or obj.creation
        helpers = {
            fn.name.value
            for u in obj.inplace
            if isinstance(fn := index.enclosing(u.node, cst.FunctionDef), cst.FunctionDef)
        }
        found = False
        for node in (*self.ctx.nodes(cst.Name), *self.ctx.nodes(cst.Attribute)):
            parent = self.ctx.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                continue  # the name of an attribute, not a variable
            if objects.for_expression(node) is not obj:  # type: ignore[arg-type]
                continue
            if isinstance(parent, cst.Attribute) and objects.for_expression(parent) is obj:
                continue  # ``ema`` of ``ema.module``: the whole reference is judged
            if index.contains(statement, node) or any(
                index.contains(u.loop or u.node, node) for u in obj.inplace
            ):
                continue
            if isinstance(parent, cst.Arg):
                call = self.ctx.parent(parent)
                name = (dotted_name(call.func) or "") if isinstance(call, cst.Call) else ""
                if name.rsplit(".", 1)[-1] in helpers | _NOT_USES:
                    continue  # handed to its own update helper, or to ``zip``
            found = True
            if isinstance(parent, cst.Subscript) and parent.value is node:
                continue
            if isinstance(parent, cst.Attribute) and parent.value is node:
                call = self.ctx.parent(parent)
                if not (isinstance(call, cst.Call) and call.func is parent):
                    continue
            return False
        return found

    def _calls_mentioning(self) -> dict[int, list[cst.Call]]:
        """Calls whose callee, receiver or an argument refers to an object, by object."""
        found = self._mentioning
        if found is None:
            found = self._mentioning = {}
            objects = self.objects
            for call in self.ctx.nodes(cst.Call):
                func = call.func
                refs = [objects.for_expression(a.value) for a in call.args]
                if isinstance(func, (cst.Name, cst.Attribute)):
                    refs.append(objects.for_expression(func))
                if isinstance(func, cst.Attribute):
                    refs.append(objects.for_expression(func.value))
                for key in dict.fromkeys(id(r) for r in refs if r is not None):
                    found.setdefault(key, []).append(call)
        return found
