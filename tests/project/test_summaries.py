"""Module summaries: what other modules need, as plain data (never a syntax tree)."""

from __future__ import annotations

import json
import textwrap

import libcst as cst

from ema_lint.analysis.project.summaries import ModuleSummary, summarize


def _summary(code: str) -> ModuleSummary:
    return summarize(cst.parse_module(textwrap.dedent(code)), "<test>")


MODEL_EMA = """
import math
from copy import deepcopy

import torch


class ModelEMA:
    def __init__(self, model, decay=0.9999, tau=2000, device=None):
        self.ema = deepcopy(model).eval()
        if device is not None:
            self.ema.to(device=device)
        self.updates = 0
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))

    def update(self, model):
        with torch.no_grad():
            self.updates += 1
            d = self.decay(self.updates)
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1 - d) * msd[k].detach()
"""


def test_a_deepcopy_class_is_summarised_with_its_decay_and_placement() -> None:
    [found] = _summary(MODEL_EMA).classes
    assert found.name == "ModelEMA" and found.structure == "deepcopy"
    assert (found.weight, found.side, found.weight_default) == ("decay", "decay", 0.9999)
    assert (found.ramp, found.ramp_param, found.ramp_default) == ("exp_tau", "tau", 2000.0)
    assert found.params == ["model", "decay", "tau", "device"]
    assert found.device == "device" and not found.cpu and not found.half
    assert found.buffers == "yes" and found.eval_on_init and found.model_copy == "ema"
    assert found.update_methods == ["update"]
    assert found.line == 8  # the text starts with a newline


def test_a_shadow_dict_class_and_its_protocol() -> None:
    [found] = _summary(
        """
        class EMA:
            def __init__(self, model, momentum=0.001):
                self.model = model
                self.momentum = momentum
                self.shadow = {}
                self.backup = {}

            def register(self):
                for name, param in self.model.named_parameters():
                    self.shadow[name] = param.data.clone()

            def update(self):
                for name, param in self.model.named_parameters():
                    self.shadow[name].mul_(1 - self.momentum).add_(param.data, alpha=self.momentum)

            def apply_shadow(self):
                for name, param in self.model.named_parameters():
                    self.backup[name] = param.data
                    param.data = self.shadow[name]

            def restore(self):
                for name, param in self.model.named_parameters():
                    param.data = self.backup[name]
        """
    ).classes
    assert found.structure == "shadow-dict"
    assert (found.weight, found.side, found.weight_default) == ("momentum", "momentum", 0.001)
    assert found.apply_methods == ["apply_shadow"] and found.restore_methods == ["restore"]
    assert found.buffers == "no"


def test_a_metric_average_is_no_averaging_class() -> None:
    summary = _summary(
        """
        class EMA:
            def __init__(self, decay=0.9):
                self.decay = decay
                self.shadow = 0.0

            def update(self, value):
                self.shadow = self.decay * self.shadow + (1.0 - self.decay) * value
        """
    )
    assert summary.classes == []


def test_update_step_and_evaluation_helpers() -> None:
    summary = _summary(
        """
        import torch

        def update_ema(target_params, source_params, rate=0.99):
            for targ, src in zip(target_params, source_params):
                targ.detach().mul_(rate).add_(src, alpha=1 - rate)

        def ema_update_dict(values, updates, decay):
            for k, v in updates.items():
                values[k] = decay * values[k] + (1 - decay) * v

        class Scaler:
            def __call__(self, loss, optimizer, update_grad=True):
                loss.backward()
                if update_grad:
                    optimizer.step()

        @torch.no_grad()
        def evaluate(model, loader):
            return [model(x) for x in loader]
        """
    )
    [updater] = summary.updaters
    assert (updater.name, updater.average, updater.live, updater.rate) == (
        "update_ema",
        "target_params",
        "source_params",
        "rate",
    )
    assert (updater.side, updater.rate_default) == ("decay", 0.99)
    [stepper] = summary.steppers
    assert stepper.is_class and stepper.backward and stepper.step
    assert stepper.condition == "update_grad"
    assert stepper.params == ["loss", "optimizer", "update_grad"]
    [evaluator] = summary.evaluators
    assert evaluator.name == "evaluate" and evaluator.unmoded == ["model"]


def test_calls_passing_averaging_objects_are_recorded() -> None:
    summary = _summary(
        """
        from timm.utils import ModelEmaV2
        from engine import train_one_epoch
        from utils.ema import ModelEMA

        def main(model, loader):
            model_ema = ModelEmaV2(model)
            local = ModelEMA(model)
            train_one_epoch(model, loader, model_ema, ema=local)
        """
    )
    evidence = {(c.callee, c.position, c.keyword, c.evidence) for c in summary.calls}
    assert ("engine.train_one_epoch", 2, None, "api:timm.utils.ModelEmaV2") in evidence
    assert ("engine.train_one_epoch", None, "ema", "ctor:utils.ema.ModelEMA") in evidence


def test_a_summary_is_plain_json_and_reads_back() -> None:
    summary = _summary(MODEL_EMA)
    text = json.dumps(summary.to_json())
    assert ModuleSummary.from_json(json.loads(text)) == summary


def test_a_call_passing_two_objects_gives_both_records_its_line() -> None:
    """One call recorded once per averaging argument: every record has the call's line (a
    message citing the caller in another file must not say ``main.py:0``)."""
    source = textwrap.dedent(
        """\
        from timm.utils import ModelEmaV2
        from engine import train_one_epoch


        def main(model, loader, optimizer):
            model_ema = ModelEmaV2(model, decay=0.9998)
            train_one_epoch(model, loader, optimizer, model_ema)
            train_one_epoch(model, loader, optimizer, model_ema)
        """
    )
    summary = summarize(cst.parse_module(source), "main.py")
    lines = sorted(c.line for c in summary.calls)
    assert lines and set(lines) <= {7, 8} and 8 in lines
    assert all(c.line for c in summary.calls)


def test_a_cpu_copy_is_recorded_only_when_the_class_does_not_manage_devices() -> None:
    kept = MODEL_EMA.replace(
        "        self.ema = deepcopy(model).eval()\n        if device is not None:\n"
        "            self.ema.to(device=device)\n",
        "        self.ema = deepcopy(model).eval().cpu()\n",
    )
    [found] = _summary(kept).classes
    assert found.cpu and found.device is None
    flagged = kept.replace(
        "deepcopy(model).eval().cpu()\n",
        "deepcopy(model).eval()\n        if device == 'cpu':\n            self.ema.cpu()\n",
    )
    [found] = _summary(flagged).classes
    assert not found.cpu  # a placement under a condition is a choice of the caller
    offloaded = kept.replace("msd[k].detach()", "msd[k].detach().cpu()")
    [found] = _summary(offloaded).classes
    assert not found.cpu  # the update brings the model's tensors over itself


HOLDER = """
def ema(model_dest, model_src, rate):
    src = dict(model_src.named_parameters())
    for name, p in model_dest.named_parameters():
        p.data.mul_(rate).add_((1 - rate) * src[name].data)


class State:
    def __init__(self, optimizer, nnet=None, nnet_ema=None):
        self.optimizer = optimizer
        self.nnet = nnet
        self.nnet_ema = nnet_ema

    def ema_update(self, rate=0.9999):
        ema(self.nnet_ema, self.nnet, rate)

    def log(self, logger):
        ema(self.nnet, self.nnet, 0.5)


class Counter:
    def __init__(self):
        self.total = 0


def init_state(config):
    state = State(config.optimizer, nnet=config.net, nnet_ema=config.net_ema)
    state.ema_update(0)
    return state


def make_counter():
    return Counter()


def either(config):
    if config.a:
        return State(config.optimizer)
    return Counter()
"""


def test_a_holder_class_and_the_function_that_builds_it() -> None:
    """A class handing an averaged attribute to the module's update function is a holder
    (its update method is that method); a function returning a new one is its factory.
    A method handing an attribute not named as averaged is no update; a function that
    may return another class is no factory."""
    summary = _summary(HOLDER)
    [holder] = summary.classes
    assert (holder.name, holder.structure) == ("State", "holder")
    assert holder.update_methods == ["ema_update"]
    assert holder.model_copy == "nnet_ema"
    [factory] = summary.factories
    assert (factory.name, factory.params, factory.cls) == ("init_state", ["config"], "State")
    assert ModuleSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary


FORWARDING = """
import copy

from timm.utils import ModelEmaV2


def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params):
        targ.detach().mul_(rate).add_(src, alpha=1 - rate)


def train_one_epoch(model, ema_params, model_params, loader, optimizer, args):
    for batch in loader:
        optimizer.step()
        update_ema(ema_params, model_params, rate=args.ema_rate)


def create_ema(model, decay):
    return ModelEmaV2(model, decay=decay)


def train(model, loader, opts):
    ema_model = copy.deepcopy(model)
    for batch in loader:
        for p_ema, p in zip(ema_model.parameters(), model.parameters()):
            p_ema.mul_(opts.decay).add_(p, alpha=1 - opts.decay)


def local(model, ema_params, model_params, loader, optimizer, args):
    update_ema(ema_params, model_params, rate=args.local_rate)


def run(args):
    local(None, [], [], [], None, args)
"""


def test_weights_set_by_callers_elsewhere_are_recorded_where_they_are_used() -> None:
    """A weight read from a parameter (or its attribute) of a top-level function that no
    call of the module passes is left for the callers in other modules; a function the
    module calls itself (``local``, called by ``run``) gets its value here."""
    summary = _summary(FORWARDING)
    found = [
        (f.name, f.param, f.attribute, f.api, f.side, f.used_by, f.line) for f in summary.forwarded
    ]
    assert len(found) == len(set(found))
    assert set(found) == {
        ("train_one_epoch", "args", "ema_rate", "", "decay", "update_ema()", 15),
        ("create_ema", "decay", None, "timm.utils.ModelEmaV2", "decay", "ModelEmaV2()", 19),
        ("train", "opts", "decay", "", "decay", "the hand-written EMA update", 26),
    }
    [engine] = [f for f in summary.forwarded if f.name == "train_one_epoch"]
    assert engine.params == ["model", "ema_params", "model_params", "loader", "optimizer", "args"]
    assert summary.forwarding("train_one_epoch") is not None
    assert summary.forwarding("local") is None
    assert ModuleSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary


MOMENTUM_MODEL = """
import copy

import torch
from torch import nn


class KeyEncoderModel(nn.Module):
    def __init__(self, make_encoder, dim=128):
        super().__init__()
        self.query_encoder = make_encoder(num_classes=dim)
        self.key_encoder = make_encoder(num_classes=dim)

    @torch.no_grad()
    def _momentum_update(self, m):
        for q, k in zip(self.query_encoder.parameters(), self.key_encoder.parameters()):
            k.data = k.data * m + q.data * (1.0 - m)

    def forward(self, x1, x2, m):
        self._momentum_update(m)
        return self.query_encoder(x1) @ self.key_encoder(x2).t()


class Wide(KeyEncoderModel):
    def build(self):
        return None


class OwnForward(KeyEncoderModel):
    def forward(self, x):
        return self.query_encoder(x)


class EmaHelper:
    def __init__(self, model, decay=0.999):
        self.model = model
        self.shadow = copy.deepcopy(model)

    def update(self):
        for e, p in zip(self.shadow.parameters(), self.model.parameters()):
            e.mul_(0.999).add_(p, alpha=1 - 0.999)
"""


def test_a_model_training_its_own_momentum_encoder_is_no_averaging_class() -> None:
    """MoCo's shape: the class builds the network its update averages from and trains it
    in ``forward``, so an instance is the trained model (wrapped in DDP, evaluated) and
    not an averaged copy; the momentum its ``forward`` is handed is recorded for calls of
    its instances, and of the subclasses that keep that ``forward``. A helper handed the
    live model stays an averaging class."""
    summary = _summary(MOMENTUM_MODEL)
    assert [c.name for c in summary.classes] == ["EmaHelper"]
    found = {(f.name, tuple(f.params), f.param, f.instance) for f in summary.forwarded}
    assert found == {
        ("KeyEncoderModel", ("x1", "x2", "m"), "m", True),
        ("Wide", ("x1", "x2", "m"), "m", True),
    }
    assert {f.line for f in summary.forwarded} == {20}  # the call handing it on


def test_a_class_handing_out_pairs_of_copies_records_its_getter() -> None:
    found = _summary(
        """
import copy

class PostHoc:
    def __init__(self, net, stds=(0.05, 0.1)):
        self.net = net
        self.stds = stds
        self.emas = [copy.deepcopy(net) for _ in stds]

    def update(self, nimg, batch):
        for std, ema in zip(self.stds, self.emas):
            for p, e in zip(self.net.parameters(), ema.parameters()):
                e.lerp_(p, 0.001)

    def get(self):
        return [(ema, f"-{std}") for std, ema in zip(self.stds, self.emas)]


class Frozen(PostHoc):
    def __init__(self, net, stds=(0.05,)):
        self.net = net
        self.stds = stds
        self.emas = [copy.deepcopy(net).train().eval() for _ in stds]

    def update(self, nimg, batch):
        for std, ema in zip(self.stds, self.emas):
            for p, e in zip(self.net.parameters(), ema.parameters()):
                e.lerp_(p, 0.001)

    def get(self):
        return [(ema, std) for std, ema in zip(self.stds, self.emas)]
"""
    )
    classes = {c.name: c for c in found.classes}
    post = classes["PostHoc"]
    assert (post.copy_getter, post.getter_pairs, post.source) == ("get", True, "net")
    assert not post.eval_on_init
    assert classes["Frozen"].eval_on_init
