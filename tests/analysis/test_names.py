"""The import-alias table, without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.names import ImportTable, dotted_name


def table(source: str) -> tuple[ImportTable, FileContext]:
    ctx = FileContext(cst.parse_module(source), "t.py")
    return ctx.get(ImportTable), ctx


def expr(source: str) -> cst.BaseExpression:
    return cst.parse_expression(source)


def test_import_forms() -> None:
    imports, _ = table(
        "import torch\n"
        "import torch.optim.swa_utils as su\n"
        "from timm.utils import ModelEmaV3 as E\n"
        "from torch.optim import swa_utils\n"
        "def main():\n    from ema_pytorch import EMA\n"
    )
    assert imports.qualified_names(expr("torch.optim.swa_utils.AveragedModel")) == (
        "torch.optim.swa_utils.AveragedModel",
    )
    assert imports.qualified_names(expr("su.update_bn")) == ("torch.optim.swa_utils.update_bn",)
    assert imports.qualified_names(expr("E")) == ("timm.utils.ModelEmaV3",)
    assert imports.qualified_names(expr("swa_utils.SWALR")) == ("torch.optim.swa_utils.SWALR",)
    assert imports.qualified_names(expr("EMA")) == ("ema_pytorch.EMA",)
    assert imports.qualified_names(expr("ModelEmaV3")) == ()
    assert imports.qualified_names(expr("self.ema")) == ()


def test_try_except_fallbacks_keep_every_candidate_in_order() -> None:
    imports, _ = table(
        "try:\n    from timm.utils import ModelEmaV3 as Ema\n"
        "except ImportError:\n    from timm.utils import ModelEmaV2 as Ema\n"
    )
    assert imports.qualified_names(expr("Ema")) == (
        "timm.utils.ModelEmaV3",
        "timm.utils.ModelEmaV2",
    )
    assert imports.resolve(expr("Ema"), {"timm.utils.ModelEmaV2"}) == "timm.utils.ModelEmaV2"


def test_star_import_and_relative() -> None:
    imports, _ = table("from torch.optim.swa_utils import *\nfrom .ema import ModelEma\n")
    assert "torch.optim.swa_utils.update_bn" in imports.qualified_names(expr("update_bn"))
    assert imports.qualified_names(expr("ModelEma")) == (".ema.ModelEma",)


def test_star_import_hands_on_the_modules_it_imports() -> None:
    # ``import torch`` in the star-imported module makes ``torch.nn...`` work here.
    imports, _ = table("import torch.distributed as dist\nfrom utils.general import *\n")
    names = imports.qualified_names(expr("torch.nn.parallel.DistributedDataParallel"))
    assert names[-1] == "torch.nn.parallel.DistributedDataParallel"
    assert names[0] == "utils.general.torch.nn.parallel.DistributedDataParallel"


def test_from_dot_import_module_is_one_level_up_only() -> None:
    imports, _ = table("from . import averaging\nfrom .. import helpers\n")
    assert imports.qualified_names(expr("averaging.ModelEMA")) == (".averaging.ModelEMA",)
    assert imports.qualified_names(expr("helpers.f")) == ("..helpers.f",)


def test_local_reference_for_fixes() -> None:
    imports, _ = table("import torch\nimport torch.optim.swa_utils as su\n")
    assert imports.local_reference("torch.optim.swa_utils.update_bn") == "su.update_bn"
    imports, _ = table("import torch\n")
    assert imports.local_reference("torch.optim.swa_utils.update_bn") == (
        "torch.optim.swa_utils.update_bn"
    )
    imports, _ = table("import numpy\n")
    assert imports.local_reference("torch.optim.swa_utils.update_bn") is None


def test_dotted_name() -> None:
    assert dotted_name(expr("a.b.c")) == "a.b.c"
    assert dotted_name(expr("a().b")) is None
