"""Which expression holds a wrapped model at a point, without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.objects.wrappers import ModelWrappers
from tests.analysis.helpers import context

SOURCE = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

def run(model, accelerator, args):
    probe(model)
    model = DDP(model)
    probe(model)
    net, opt = accelerator.prepare(args.net, args.opt)
    probe(net, opt)
    if args.compile:
        model = torch.compile(model)
    probe(model)
    model = model.module
    probe(model)
"""


def test_wrapped_at_each_point() -> None:
    ctx = context(SOURCE)
    wrappers = ctx.get(ModelWrappers)
    probes = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "probe"]

    def at(n: int, arg: int = 0):
        call = probes[n]
        return wrappers.wrapped_at(call.args[arg].value, call)

    assert at(0) is None
    ddp = at(1)
    assert ddp.wrapper == "DistributedDataParallel" and not ddp.conditional
    prepared = at(2)
    assert (
        prepared.wrapper == "accelerator.prepare"
        and ctx.code(prepared.accelerator) == "accelerator"
    )
    assert at(2, 1).wrapper == "accelerator.prepare"  # the optimizer too: rules ask for models only
    compiled = at(3)
    assert compiled.wrapper == "torch.compile" and compiled.conditional
    assert at(4) is None


def test_inline_wrapper_call() -> None:
    ctx = context("import torch\nx = probe(torch.compile(model))\n")
    [call] = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "probe"]
    found = ctx.get(ModelWrappers).wrapped_at(call.args[0].value, call)
    assert found.wrapper == "torch.compile" and found.assignment is None


def test_a_function_of_the_module_that_returns_the_model_wrapped() -> None:
    import libcst as cst

    from ema_lint.analysis.objects.wrappers import ModelWrappers
    from tests.analysis.helpers import context

    source = """
from torch.nn.parallel import DistributedDataParallel as DDP

def maybe(model, args):
    if args.distributed:
        model = DDP(model)
    return model

def always(model):
    return DDP(model)

def inner(model):
    return DDP(model).module

def main(net, args):
    a = maybe(net, args)
    b = always(net)
    c = inner(net)
    probe(a, b, c)
"""
    ctx = context(source)
    wrappers = ctx.get(ModelWrappers)
    [call] = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "probe"]
    a, b, c = (arg.value for arg in call.args)
    first, second = wrappers.wrapped_at(a, call), wrappers.wrapped_at(b, call)
    assert first is not None and first.wrapper == "DistributedDataParallel" and first.conditional
    assert second is not None and not second.conditional
    assert wrappers.wrapped_at(c, call) is None


def test_a_self_attribute_wrapped_by_a_method_called_before() -> None:
    import libcst as cst

    from ema_lint.analysis.objects.wrappers import ModelWrappers
    from tests.analysis.helpers import context

    source = """
from torch.nn.parallel import DistributedDataParallel as DDP

class Trainer:
    def __init__(self, model):
        self.model = model
        self._wrap()
        self._build()
        self.model = self.model.module
        self._build_again()

    def _wrap(self):
        self.model = DDP(self.model)

    def _build(self):
        probe(self.model)

    def _build_again(self):
        probe(self.model)
"""
    ctx = context(source)
    wrappers = ctx.get(ModelWrappers)
    first, second = [c for c in ctx.nodes(cst.Call) if ctx.code(c.func) == "probe"]
    found = wrappers.wrapped_at(first.args[0].value, first)
    assert found is not None and found.wrapper == "DistributedDataParallel"
    assert not found.conditional
    assert wrappers.wrapped_at(second.args[0].value, second) is None  # unwrapped again
