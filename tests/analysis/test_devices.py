"""Device facts: accelerator use, CPU placements of averages, offload idioms."""

from __future__ import annotations

from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.objects.devices import Devices
from tests.analysis.helpers import context


def test_accelerator_use_and_cpu_placements() -> None:
    ctx = context(
        "import copy\nimport torch\nfrom torch.optim.swa_utils import AveragedModel\n"
        "CPU = torch.device('cpu')\n"
        "model = model.to('cuda:0')\n"
        "ema = copy.deepcopy(model).cpu()\n"
        "swa = AveragedModel(model, device=CPU)\n"
        "avg = AveragedModel(model, device='cpu' if flag else None)\n"
        "ema.update(model)\nswa.update_parameters(model)\navg.update_parameters(model)\n"
    )
    devices = ctx.get(Devices)
    assert ctx.code(devices.accelerator_use()) == "'cuda:0'"
    found = {o.names[0]: devices.cpu_placements(o) for o in ctx.get(AveragingObjects).objects}
    assert [p.kind for p in found["ema"]] == ["call"]
    assert [p.kind for p in found["swa"]] == ["argument"]
    assert found["avg"] == []  # chosen by a flag


def test_offload_idioms_and_cpu_only_modules() -> None:
    ctx = context(
        "from diffusers.training_utils import EMAModel\n"
        "from ema_pytorch import EMA\n"
        "e = EMAModel(params)\ne.to('cpu')\ne.pin_memory()\n"
        "lucid = EMA(model, allow_different_devices=True)\n"
    )
    devices = ctx.get(Devices)
    assert devices.accelerator_use() is None
    e, lucid = ctx.get(AveragingObjects).objects
    assert devices.offloaded(e) == "pinned memory"
    assert devices.offloaded(lucid) == "allow_different_devices=True"
