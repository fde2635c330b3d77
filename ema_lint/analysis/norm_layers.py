"""Whether a model has BatchNorm layers, when the module shows how the model is built.

``AveragedModel`` copies BatchNorm running statistics instead of averaging them, so an SWA
model needs ``update_bn``; a model without BatchNorm (a transformer with LayerNorm, a UNet
with GroupNorm, a plain MLP) does not. Usually the model comes from elsewhere and this
cannot be seen: the answer is then *unknown* (None), and rules treat it as "may have". It is
``False`` only when every layer is visible: the model is made by a class or function of this
module (or a ``torch.nn`` container) whose every constructor call is a ``torch`` layer
without BatchNorm, a builtin, or again such a class or function of the module.
"""

from __future__ import annotations

import builtins

import libcst as cst

from .context import FileContext
from .names import ImportTable
from .origins import Origins
from .values import ValueResolver

_BATCH_NORM = ("BatchNorm", "batch_norm", "SyncBatchNorm")
# Bases of a model class that add no layers of their own.
_MODULE_BASES = {
    "torch.nn.Module",
    "torch.nn.modules.module.Module",
    "lightning.pytorch.LightningModule",
    "lightning.LightningModule",
    "pytorch_lightning.LightningModule",
    "pytorch_lightning.core.LightningModule",
    "object",
}
_BUILTINS = frozenset(dir(builtins))
# torch functions that return a model this module does not show.
_LOADERS = ("torch.hub.", "torch.load", "torch.jit.", "torch.export.", "torch.package.")


class NormLayers:
    """BatchNorm questions about the models of one module."""

    MAX_DEPTH = 8

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.index = ctx.index
        self.imports = ctx.get(ImportTable)
        self.resolver = ctx.get(ValueResolver)
        self._classes = {
            c.name.value: c
            for c in ctx.nodes(cst.ClassDef)
            if isinstance(c, cst.ClassDef) and self.index.enclosing(c, cst.FunctionDef) is None
        }
        self._functions = {
            f.name.value: f
            for f in ctx.nodes(cst.FunctionDef)
            if isinstance(f, cst.FunctionDef)
            and self.index.enclosing(f, cst.FunctionDef, cst.ClassDef) is None
        }
        self._memo: dict[int, bool | None] = {}

    @classmethod
    def build(cls, ctx: FileContext) -> NormLayers:
        return cls(ctx)

    def batch_norm(self, model: cst.BaseExpression) -> bool | None:
        """True if the model ``model`` refers to has BatchNorm, False if the module shows
        every layer and none is, None when it cannot be seen."""
        made = self.ctx.get(Origins).creation(model)
        if made is None:
            return None
        return self._call(made, 0)

    # Walking the construction ----------------------------------------------------------------
    def _call(self, call: cst.Call, depth: int) -> bool | None:
        if depth > self.MAX_DEPTH:
            return None
        func = call.func
        qualified = self._qualified(func)
        if qualified is not None:
            if any(b in qualified for b in _BATCH_NORM):
                return True
            if qualified.startswith("torch.nn."):
                # A layer or container: its arguments may be layers (nn.Sequential(...)).
                return self._combine(self._scan(arg.value, depth + 1) for arg in call.args)
            if qualified.startswith("torch.") and not qualified.startswith(_LOADERS):
                return False  # tensor functions
            return None
        if isinstance(func, cst.Name):
            if func.value in self._classes:
                return self._class(self._classes[func.value], depth + 1)
            if func.value in self._functions:
                return self._scan(self._functions[func.value], depth + 1)
            if func.value in _BUILTINS:
                return False
            bindings = self.resolver.bindings_of(func) or []
            if bindings and all(b.kind == "other" for b in bindings):
                return False  # calls a loop variable or unpacked object: a forward pass
            if len(bindings) == 1 and bindings[0].kind == "assign" and bindings[0].value:
                return self._scan(bindings[0].value, depth + 1)
            return None
        return False  # a method call on an object (``x.view()``, ``self.fc(x)``)

    def _class(self, cls: cst.ClassDef, depth: int) -> bool | None:
        key = id(cls)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # recursion guard: a self-referencing model is unknown
        results: list[bool | None] = []
        for base in cls.bases:
            qualified = self._qualified(base.value)
            if qualified in _MODULE_BASES or (
                isinstance(base.value, cst.Name) and base.value.value == "object"
            ):
                continue
            if qualified is not None and any(b in qualified for b in _BATCH_NORM):
                results.append(True)
            elif isinstance(base.value, cst.Name) and base.value.value in self._classes:
                results.append(self._class(self._classes[base.value.value], depth + 1))
            else:
                results.append(None)
        results.append(self._scan(cls.body, depth))
        found = self._combine(iter(results))
        self._memo[key] = found
        return found

    def _scan(self, node: cst.CSTNode, depth: int) -> bool | None:
        """Every layer referenced or constructed inside ``node``."""
        if depth > self.MAX_DEPTH:
            return None
        for ref in self.index.descendants(node, (cst.Attribute, cst.Name)):
            qualified = self._qualified(ref)  # type: ignore[arg-type]
            if qualified is not None and any(b in qualified for b in _BATCH_NORM):
                return True
        if isinstance(node, (cst.Attribute, cst.Name)):
            qualified = self._qualified(node)
            if qualified is not None and any(b in qualified for b in _BATCH_NORM):
                return True
        calls = list(self.index.descendants(node, cst.Call))
        if isinstance(node, cst.Call):
            calls.insert(0, node)
        return self._combine(self._call(c, depth) for c in calls)  # type: ignore[arg-type]

    def _qualified(self, node: cst.BaseExpression) -> str | None:
        names = self.imports.qualified_names(node)
        if names:
            return names[0]
        if isinstance(node, cst.Name) and node.value not in self._classes:
            return self.resolver.qualified(node)  # norm_layer=nn.LayerNorm, passed down
        return None

    @staticmethod
    def _combine(results) -> bool | None:
        unknown = False
        for result in results:
            if result is True:
                return True
            if result is None:
                unknown = True
        return None if unknown else False
