"""Module-wide evidence of BatchNorm layers (NormLayers.evidence_nodes)."""

from __future__ import annotations

import pytest

from ema_lint.analysis.objects.norm_layers import NormLayers
from tests.analysis.helpers import context


@pytest.mark.parametrize(
    ("source", "evidence"),
    [
        ("from torch import nn\nlayer = nn.BatchNorm2d(8)\n", "nn.BatchNorm2d"),
        ("import torch\nnet = Net(norm_layer=torch.nn.SyncBatchNorm)\n", "torch.nn.SyncBatchNorm"),
        ("from torch.nn import BatchNorm1d\nbn = BatchNorm1d(4)\n", "BatchNorm1d"),
        ("from torchvision.models import resnet50\nm = resnet50()\n", "resnet50(...)"),
        (
            "import torchvision\nm = torchvision.models.mobilenet_v3_small()\n",
            "torchvision.models.mobilenet_v3_small(...)",
        ),
        (
            "import timm\nm = timm.create_model('efficientnet_b0', pretrained=True)\n",
            "timm.create_model(...)",
        ),
        (
            "import timm\nm = timm.create_model('hf_hub:timm/resnet50.a1_in1k')\n",
            "timm.create_model(...)",
        ),
    ],
)
def test_batchnorm_found(source: str, evidence: str) -> None:
    buffers = context(source).get(NormLayers)
    assert buffers.has_batchnorm and buffers.evidence() == evidence


@pytest.mark.parametrize(
    "source",
    [
        "from torch import nn\nm = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))\n",
        "from torchvision.ops import FrozenBatchNorm2d\nbn = FrozenBatchNorm2d(8)\n",
        "import timm\nm = timm.create_model('vit_base_patch16_224')\n",
        "import timm\nm = timm.create_model(name)\n",
        "def resnet18():\n    return Net()\nm = resnet18()\n",  # a local function, not torchvision
    ],
)
def test_no_batchnorm(source: str) -> None:
    assert not context(source).get(NormLayers).has_batchnorm
