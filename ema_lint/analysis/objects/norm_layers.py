"""Whether a model has BatchNorm layers, when the module shows how the model is built.

``AveragedModel`` copies BatchNorm running statistics instead of averaging them, so an SWA
model needs ``update_bn``; a model without BatchNorm (a transformer with LayerNorm, a UNet
with GroupNorm, a plain MLP) does not. Usually the model comes from elsewhere and this
cannot be seen: the answer is then *unknown* (None), and rules treat it as "may have". It is
``False`` only when every layer is visible: the model is made by a class or function of this
module (or a ``torch.nn`` container) whose every constructor call is a ``torch`` layer
without BatchNorm, a builtin, or again such a class or function of the module.

The module-wide question "does this file show BatchNorm at all?" (for rules that need
positive evidence before reporting, such as an average of ``parameters()`` only) is
answered by :attr:`NormLayers.evidence_nodes`: a BatchNorm class named in the module
(``nn.BatchNorm2d``, ``norm_layer=nn.SyncBatchNorm``) or a torchvision/timm CNN whose
architecture has them (``resnet50()``, ``timm.create_model("efficientnet_b0")``).
Frozen BatchNorm (``FrozenBatchNorm2d``), whose statistics never change, does not count.
"""

from __future__ import annotations

import builtins
import re
from functools import cached_property

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name
from ema_lint.analysis.syntax.origins import SAME_OBJECT_METHODS, Origins
from ema_lint.analysis.syntax.values import ValueResolver

# A BatchNorm layer class (not FrozenBatchNorm2d, whose statistics never change).
_BATCHNORM_CLASS = re.compile(r"^(Sync|Lazy)?BatchNorm([123]d)?$")
# Architectures with BatchNorm, by constructor (torchvision) or model name (timm).
_BN_ARCHITECTURES = re.compile(
    r"^(tv_|tf_)?(resnet|resnext|wide_resnet|seresnet|seresnext|skresnet|res2net|resnest|"
    r"resnetrs|densenet|mobilenet|efficientnet|regnet|mnasnet|shufflenet|googlenet|inception|"
    r"vgg\d+_bn|deeplabv3|fcn_|lraspp|cspresnet|cspdarknet|darknet|dla|dpn|ghostnet|hrnet|"
    r"mixnet|rexnet|selecsls|senet|xception|fbnet|lcnet|hardcorenas|tinynet|spnasnet)"
)


def _is_batch_norm(qualified: str) -> bool:
    """``torch.nn.BatchNorm2d``, ``torch.nn.functional.batch_norm``, ``...SyncBatchNorm``."""
    last = qualified.rsplit(".", 1)[-1]
    return bool(_BATCHNORM_CLASS.match(last)) or last == "batch_norm"


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
# torch.nn classes and functions whose arguments are layers.
_WRAPPERS = tuple(
    f"torch.nn.{name}"
    for name in (
        "Sequential",
        "ModuleList",
        "ModuleDict",
        "TransformerEncoder",
        "TransformerDecoder",
        "DataParallel",
        "parallel.",
        "utils.",
    )
)
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
        return self._layer(model, 0)

    # Walking the construction ----------------------------------------------------------------
    def _layer(self, expr: cst.BaseExpression, depth: int) -> bool | None:
        """A layer given as a value: an argument of ``nn.Sequential``, a submodule used."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and self._qualified(func) is None:
                if func.attr.value in SAME_OBJECT_METHODS:
                    return self._layer(func.value, depth + 1)
                return None  # ``resnet.children()``: parts of a model made elsewhere
            if isinstance(func, cst.Name) and func.value in ("list", "tuple", "reversed"):
                return self._combine(self._layer(a.value, depth + 1) for a in expr.args)
            return self._call(expr, depth)
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = self._qualified(expr)
            if qualified is not None:
                return True if _is_batch_norm(qualified) else None
            value = self.resolver.resolve(expr)
            if value is not None:
                return False  # a number, string or flag: not a layer
            made = self.ctx.get(Origins).creation(expr)
            return self._call(made, depth + 1) if made is not None else None
        if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
            return self._combine(self._layer(e.value, depth + 1) for e in expr.elements)
        if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
            return self._layer(expr.elt, depth + 1)
        if isinstance(expr, cst.StarredElement):
            return self._layer(expr.value, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self._layer(expr.value, depth + 1)
        if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
            return False
        if isinstance(expr, cst.Dict):  # nn.ModuleDict({...})
            return self._combine(
                self._layer(e.value, depth + 1)
                for e in expr.elements
                if isinstance(e, cst.DictElement)
            )
        return None

    def _call(self, call: cst.Call, depth: int) -> bool | None:
        """A call that constructs something: a layer, a model of the module, a builtin."""
        if depth > self.MAX_DEPTH:
            return None
        func = call.func
        qualified = self._qualified(func)
        if qualified is not None:
            if _is_batch_norm(qualified) or self._known_cnn(call, qualified):
                return True
            if qualified.startswith("torch.nn."):
                if not qualified.startswith(_WRAPPERS):
                    return False  # a layer without BatchNorm: Linear, Conv2d, LayerNorm...
                # A container or wrapper: its arguments are layers (nn.Sequential(...)).
                return self._combine(
                    self._layer(arg.value, depth + 1)
                    for arg in call.args
                    if arg.keyword is None or "layer" in arg.keyword.value
                )
            if qualified.startswith("torch.") and not qualified.startswith(_LOADERS):
                return False  # tensor functions
            return None
        if isinstance(func, cst.Name):
            if func.value in self._classes:
                return self._class(self._classes[func.value], depth + 1)
            if func.value in self._functions:
                return self._scan(self._functions[func.value], None, depth + 1)
            if func.value in _BUILTINS:
                return False
            bindings = self.resolver.bindings_of(func) or []
            if bindings and all(b.kind == "other" for b in bindings):
                return False  # calls a loop variable or unpacked object: a forward pass
            if len(bindings) == 1 and bindings[0].kind == "assign" and bindings[0].value:
                return self._layer(bindings[0].value, depth + 1)
            return None
        return False  # a method call on an object: a computation, not a constructor

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
            if qualified is not None and _is_batch_norm(qualified):
                results.append(True)
            elif isinstance(base.value, cst.Name) and base.value.value in self._classes:
                results.append(self._class(self._classes[base.value.value], depth + 1))
            else:
                results.append(None)
        results.append(self._scan(cls.body, cls, depth))
        found = self._combine(iter(results))
        self._memo[key] = found
        return found

    def _scan(self, node: cst.CSTNode, cls: cst.ClassDef | None, depth: int) -> bool | None:
        """Every layer referenced, constructed or used (``self.backbone(x)``) in ``node``."""
        if depth > self.MAX_DEPTH:
            return None
        for ref in self.index.descendants(node, (cst.Attribute, cst.Name)):
            qualified = self._qualified(ref)  # type: ignore[arg-type]
            if qualified is not None and _is_batch_norm(qualified):
                return True
        attributes = self.resolver.self_assignments(cls) if cls is not None else {}
        results: list[bool | None] = []
        for call in self.index.descendants(node, cst.Call):
            assert isinstance(call, cst.Call)
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Name)
                and func.value.value == "self"
            ):
                if func.attr.value in attributes:
                    results.append(self._layer(func, depth + 1))  # a submodule's forward
                continue
            results.append(self._call(call, depth))
            if results[-1] is True:
                return True
        return self._combine(iter(results))

    # Module-wide evidence ---------------------------------------------------------------------
    @cached_property
    def evidence_nodes(self) -> list[cst.CSTNode]:
        """Nodes that name a BatchNorm class or build a CNN with BatchNorm, in document order."""
        found: list[cst.CSTNode] = [
            name
            for name in self.ctx.nodes(cst.Name)
            if _BATCHNORM_CLASS.match(name.value)  # type: ignore[attr-defined]
        ]
        for call in self.ctx.nodes(cst.Call):
            func = call.func
            last = func.attr.value if isinstance(func, cst.Attribute) else None
            if isinstance(func, cst.Name):
                last = func.value
            if last is None or not (last == "create_model" or _BN_ARCHITECTURES.match(last)):
                continue
            qualified = self._qualified(func)
            if qualified is not None and self._known_cnn(call, qualified):
                found.append(call)
        found.sort(key=lambda n: self.index.order[id(n)])
        return found

    @property
    def has_batchnorm(self) -> bool:
        """The module shows a BatchNorm layer somewhere (positive evidence only)."""
        return bool(self.evidence_nodes)

    def evidence(self) -> str:
        """What shows the BatchNorm layers, for messages: ``nn.BatchNorm2d``, ``resnet50(...)``."""
        if not self.evidence_nodes:
            return ""
        node = self.evidence_nodes[0]
        if isinstance(node, cst.Name):
            parent = self.ctx.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                return self.ctx.code(parent)
            return node.value
        assert isinstance(node, cst.Call)
        return f"{dotted_name(node.func) or self.ctx.code(node.func)}(...)"

    @staticmethod
    def _known_cnn(call: cst.Call, qualified: str) -> bool:
        """A torchvision CNN constructor, or timm.create_model of a CNN with BatchNorm."""
        last = qualified.rsplit(".", 1)[-1]
        if qualified.startswith("timm.") and last == "create_model":
            if not call.args or not isinstance(call.args[0].value, cst.SimpleString):
                return False
            model = call.args[0].value.evaluated_value
            return isinstance(model, str) and bool(
                _BN_ARCHITECTURES.match(model.rsplit("/", 1)[-1].split(".", 1)[0])
            )
        return qualified.startswith("torchvision.models") and bool(_BN_ARCHITECTURES.match(last))

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
