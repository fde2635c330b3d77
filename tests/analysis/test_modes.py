"""Train/eval mode of averaged copies along a path, without any rule."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.objects.averaging import AveragingObjects
from ema_lint.analysis.training.modes import Mode, ModeTracker
from tests.analysis.helpers import context


def at(source: str, marker: str, name: str) -> Mode:
    ctx = context(source)
    tracker = ctx.get(ModeTracker)
    [obj] = [o for o in ctx.get(AveragingObjects).objects if name in o.names]
    [node] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == marker]
    return tracker.mode_at(obj, node)


LOOP = """
import copy
from timm.utils import ModelEmaV2
from torch.optim.swa_utils import AveragedModel

def run(model, loader):
    ema = copy.deepcopy(model)
    timm_ema = ModelEmaV2(model)
    ema_edm = copy.deepcopy(model).eval()
    swa = AveragedModel(model)
    for epoch in range(3):
        probe_a(ema, timm_ema, ema_edm, swa)
        swa.eval()
        probe_b(swa)
        swa.train()
"""


@pytest.mark.parametrize(
    ("marker", "name", "mode"),
    [
        ("probe_a(ema, timm_ema, ema_edm, swa)", "ema", Mode.TRAIN),
        ("probe_a(ema, timm_ema, ema_edm, swa)", "timm_ema", Mode.EVAL),
        ("probe_a(ema, timm_ema, ema_edm, swa)", "ema_edm", Mode.EVAL),
        # The previous epoch ended with swa.train().
        ("probe_a(ema, timm_ema, ema_edm, swa)", "swa", Mode.TRAIN),
        ("probe_b(swa)", "swa", Mode.EVAL),
    ],
)
def test_modes_along_a_loop(marker: str, name: str, mode: Mode) -> None:
    assert at(LOOP, marker, name) is mode


def test_mode_through_callers_and_helpers() -> None:
    source = """
import copy

def to_eval(net):
    net.eval()

class T:
    def __init__(self, model):
        self.ema = copy.deepcopy(model)

    def check(self):
        probe(self.ema)

    def fit(self):
        for epoch in range(3):
            self.check()
            to_eval(self.ema)
            self.check()
"""
    ctx = context(source)
    tracker = ctx.get(ModeTracker)
    [obj] = ctx.get(AveragingObjects).objects
    [probe] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == "probe(self.ema)"]
    # check() is called once before to_eval() in the first epoch: train there.
    assert tracker.mode_at(obj, probe) is Mode.TRAIN
    [second] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == "self.check()"][1:]
    assert tracker.mode_at(obj, second) is Mode.EVAL


def test_parent_train_and_lightning_hooks() -> None:
    source = """
import lightning.pytorch as pl
from timm.utils import ModelEmaV2

class Lit(pl.LightningModule):
    def __init__(self, net):
        super().__init__()
        self.ema = ModelEmaV2(net)

    def on_train_epoch_end(self):
        probe_train(self.ema)

    def validation_step(self, batch, i):
        probe_val(self.ema)

    def helper(self):
        self.train()
        probe_after_parent(self.ema)
"""
    assert at(source, "probe_train(self.ema)", "self.ema") is Mode.TRAIN
    assert at(source, "probe_val(self.ema)", "self.ema") is Mode.EVAL
    assert at(source, "probe_after_parent(self.ema)", "self.ema") is Mode.TRAIN


def test_unknown_when_the_path_ends_and_the_mode_changes_elsewhere() -> None:
    source = """
import copy

class T:
    def __init__(self, model):
        self.ema = copy.deepcopy(model)

    def somewhere(self):
        self.ema.eval()

    def check(self):
        probe(self.ema)
"""
    assert at(source, "probe(self.ema)", "self.ema") is Mode.UNKNOWN
    # Without the switch elsewhere, the copy keeps its initial train mode.
    plain = source.replace("self.ema.eval()", "pass")
    assert at(plain, "probe(self.ema)", "self.ema") is Mode.TRAIN


def test_copy_of_a_model_in_eval_mode_and_train_false() -> None:
    source = """
import copy

def run(model):
    model.eval()
    ema = copy.deepcopy(model)
    probe(ema)
    ema.train()
    ema.train(False)
    probe_again(ema)
"""
    assert at(source, "probe(ema)", "ema") is Mode.EVAL
    assert at(source, "probe_again(ema)", "ema") is Mode.EVAL


# The live model (averaged weights swapped in): only the code's own mode calls count. ----
LIVE = """
import torch

def helper_train(net):
    net.train()

def run(model, loader, args):
    {body}
"""


def live(body: str) -> Mode:
    ctx = context(LIVE.format(body=body.replace("\n", "\n    ")))
    [node] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == "probe(model)"]
    [model] = [a.value for a in node.args]
    mode, _ = ctx.get(ModeTracker).live_mode_at(model, node)
    return mode


@pytest.mark.parametrize(
    ("body", "mode"),
    [
        ("model.train()\nprobe(model)", Mode.TRAIN),
        ("model.train()\nmodel.eval()\nprobe(model)", Mode.EVAL),
        ("model.module.eval()\nprobe(model)", Mode.EVAL),
        ("helper_train(model)\nprobe(model)", Mode.TRAIN),
        ("probe(model)", Mode.UNKNOWN),
        ("if args.bn:\n    model.train()\nprobe(model)", Mode.UNKNOWN),
        ("model.train()\nfor x in loader:\n    probe(model)", Mode.TRAIN),
        ("for x in loader:\n    probe(model)\n    model.train()", Mode.TRAIN),
        ("model.train(args.flag)\nprobe(model)", Mode.UNKNOWN),
        ("other.train()\nprobe(model)", Mode.UNKNOWN),
    ],
)
def test_live_model_mode(body: str, mode: Mode) -> None:
    assert live(body) is mode


def test_live_model_mode_through_every_caller() -> None:
    source = """
def check(net):
    probe(net)

def a(model):
    model.train()
    check(model)

def b(model):
    model.eval()
    check(model)
"""
    ctx = context(source)
    [node] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == "probe(net)"]
    mode, _ = ctx.get(ModeTracker).live_mode_at(node.args[0].value, node)
    assert mode is Mode.UNKNOWN  # one caller trains, the other evaluates
    only_a = source.split("def b")[0]
    ctx = context(only_a)
    [node] = [c for c in ctx.nodes(cst.Call) if ctx.code(c) == "probe(net)"]
    mode, cause = ctx.get(ModeTracker).live_mode_at(node.args[0].value, node)
    assert mode is Mode.TRAIN and ctx.code(cause) == "model.train()"
