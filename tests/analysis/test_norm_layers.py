"""Whether a model has BatchNorm, when the module shows it, without any rule."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.objects.norm_layers import NormLayers
from tests.analysis.helpers import context

MODELS = """
import torch
from torch import nn
import torchvision


class Block(nn.Module):
    def __init__(self, dim, norm_layer=nn.LayerNorm):
        super().__init__()
        self.norm = norm_layer(dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.fc(self.norm(x))) + x


class Transformer(nn.Module):
    def __init__(self, dim=64, depth=4):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.head = nn.Sequential(nn.GroupNorm(8, dim), nn.Linear(dim, 10))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.flatten(1))


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torchvision.models.resnet18()


def make_mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


transformer = Transformer().to("cuda")
convnet = ConvNet()
backbone = Backbone()
vit = torchvision.models.vit_b_16()
mlp = make_mlp()
sequential_bn = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
hub = torch.hub.load("repo", "model")
unknown = build_model(cfg)
"""


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("transformer", False),
        ("convnet", True),
        ("backbone", True),  # torchvision's resnet18 has BatchNorm
        ("vit", None),  # a torchvision model whose layers the module does not show
        ("mlp", False),
        ("sequential_bn", True),
        ("hub", None),
        ("unknown", None),
    ],
)
def test_batch_norm_when_visible(name: str, expected: bool | None) -> None:
    ctx = context(MODELS + f"\n__probe__ = {name}\n")
    probe = ctx.module.body[-1].body[0].targets[0].target
    assert isinstance(probe, cst.Name)
    value = ctx.module.body[-1].body[0].value
    assert ctx.get(NormLayers).batch_norm(value) is expected


def test_batch_norm_passed_down_as_a_layer_class() -> None:
    ctx = context(
        "from torch import nn\n"
        "class Block(nn.Module):\n"
        "    def __init__(self, dim, norm_layer=nn.LayerNorm):\n"
        "        super().__init__()\n"
        "        self.norm = norm_layer(dim)\n"
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.block = Block(16, norm_layer=nn.BatchNorm1d)\n"
        "net = Net()\n"
        "block = Block(8)\n"
    )
    layers = ctx.get(NormLayers)
    net, block = (s.body[0].value for s in ctx.module.body[-2:])
    assert layers.batch_norm(net) is True
    assert layers.batch_norm(block) is None  # its callers pass different norm layers


def test_modules_given_from_outside_are_unknown() -> None:
    ctx = context(
        "from torch import nn\n"
        "class Head(nn.Module):\n"
        "    def __init__(self, backbone, num_classes=10):\n"
        "        super().__init__()\n"
        "        self.backbone = backbone\n"
        "        self.num_classes = num_classes\n"
        "        self.fc = nn.Linear(512, num_classes)\n"
        "    def forward(self, x):\n"
        "        return self.fc(self.backbone(x))\n"
        "    def log_it(self):\n"
        "        self.log('x', 1)\n"
        "wrapped = nn.Sequential(resnet, nn.Flatten(), nn.Linear(512, 10))\n"
        "parts = nn.Sequential(*list(resnet.children())[:-1], nn.AdaptiveAvgPool2d(1))\n"
        "head = Head(backbone)\n"
        "linear_head = nn.Sequential(nn.Flatten(), nn.Linear(512, 10))\n"
    )
    layers = ctx.get(NormLayers)
    values = [s.body[0].value for s in ctx.module.body[-4:]]
    assert [layers.batch_norm(v) for v in values] == [None, None, None, False]
