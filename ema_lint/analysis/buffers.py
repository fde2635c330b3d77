"""Whether the module's models have buffers that matter for evaluation: BatchNorm statistics.

An average of the parameters alone leaves a model copy's BatchNorm running mean and
variance where they were when it was copied. That matters only when the model has BatchNorm
layers, which a linter sees as a layer class named in the module (``nn.BatchNorm2d``,
``SyncBatchNorm``, ``norm_layer=nn.BatchNorm2d``) or a CNN built from torchvision or timm
whose architecture has them (``torchvision.models.resnet50()``,
``timm.create_model("efficientnet_b0")``). Transformers, ConvNeXt, NFNets and models with
frozen BatchNorm (``FrozenBatchNorm2d``, whose statistics never change) do not count.
"""

from __future__ import annotations

import re

import libcst as cst

from .context import FileContext
from .names import ImportTable, dotted_name

_BATCHNORM = re.compile(r"^(Sync|Lazy)?BatchNorm([123]d)?$")
# Architectures with BatchNorm, by constructor (torchvision) or model name (timm).
_BN_ARCHITECTURES = re.compile(
    r"^(tv_|tf_)?(resnet|resnext|wide_resnet|seresnet|seresnext|skresnet|res2net|resnest|"
    r"resnetrs|densenet|mobilenet|efficientnet|regnet|mnasnet|shufflenet|googlenet|inception|"
    r"vgg\d+_bn|deeplabv3|fcn_|lraspp|cspresnet|cspdarknet|darknet|dla|dpn|ghostnet|hrnet|"
    r"mixnet|rexnet|selecsls|senet|xception|fbnet|lcnet|hardcorenas|tinynet|spnasnet)"
)


class ModelBuffers:
    """Where the module builds layers whose running statistics matter for evaluation."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        # Nodes that name or build a BatchNorm layer, in document order.
        self.batchnorm: list[cst.CSTNode] = []
        for name in ctx.nodes(cst.Name):
            if _BATCHNORM.match(name.value):  # type: ignore[attr-defined]
                self.batchnorm.append(name)
        imports: ImportTable | None = None
        for call in ctx.nodes(cst.Call):
            func = call.func
            last = func.attr.value if isinstance(func, cst.Attribute) else None
            if isinstance(func, cst.Name):
                last = func.value
            if last is None:
                continue
            if last == "create_model" or _BN_ARCHITECTURES.match(last):
                if imports is None:
                    imports = ctx.get(ImportTable)
                if self._builds_bn_cnn(call, last, imports):
                    self.batchnorm.append(call)
        self.batchnorm.sort(key=lambda n: ctx.index.order[id(n)])

    @classmethod
    def build(cls, ctx: FileContext) -> ModelBuffers:
        return cls(ctx)

    @property
    def has_batchnorm(self) -> bool:
        return bool(self.batchnorm)

    def evidence(self) -> str:
        """What shows the BatchNorm layers, for messages: ``nn.BatchNorm2d``, ``resnet50()``."""
        if not self.batchnorm:
            return ""
        node = self.batchnorm[0]
        if isinstance(node, cst.Name):
            parent = self.ctx.parent(node)
            if isinstance(parent, cst.Attribute) and parent.attr is node:
                return self.ctx.code(parent)
            return node.value
        assert isinstance(node, cst.Call)
        return f"{dotted_name(node.func) or self.ctx.code(node.func)}(...)"

    @staticmethod
    def _builds_bn_cnn(call: cst.Call, last: str, imports: ImportTable) -> bool:
        names = imports.qualified_names(call.func)
        if last == "create_model":
            if not any(n.startswith("timm.") for n in names) or not call.args:
                return False
            first = call.args[0].value
            if not isinstance(first, cst.SimpleString):
                return False
            model = first.evaluated_value
            return isinstance(model, str) and bool(
                _BN_ARCHITECTURES.match(model.rsplit("/", 1)[-1].split(".", 1)[0])
            )
        return any(n.startswith("torchvision.models") for n in names)
