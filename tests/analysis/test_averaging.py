"""What each averaging object is, how it is tracked and classified, without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.objects.averaging import (
    AveragingObjects,
    Method,
    Use,
    is_averaged_name,
    tokens,
)
from tests.analysis.helpers import calls_named, context


def objects(source: str):
    ctx = context(source)
    return ctx, ctx.get(AveragingObjects)


def by_name(found: AveragingObjects, name: str):
    matches = [o for o in found.objects if name in o.names]
    assert len(matches) == 1, [o.names for o in found.objects]
    return matches[0]


def test_api_objects_tracked_through_self_arguments_and_returns() -> None:
    ctx, found = objects(
        """
from timm.utils import ModelEmaV2

def create_ema(model):
    return ModelEmaV2(model, decay=0.9998)

def update(ema, model):
    ema.update(model)

class Trainer:
    def __init__(self, model):
        self.model = model
        self.ema = create_ema(model)

    def step(self):
        update(self.ema, self.model)
        self.ema.module.eval()
        alias = self.ema
        alias.update(self.model)
"""
    )
    [obj] = found.objects
    assert obj.kind is Method.EMA and obj.use is Use.EVAL
    assert obj.spec.short_name == "ModelEmaV2" and not obj.hand_made
    assert "self.ema" in obj.names and "alias" in obj.names
    assert cst.Module([]).code_for_node(obj.source) == "model"
    assert [ctx.code(u) for u in obj.updates] == ["ema.update(model)", "alias.update(self.model)"]
    [module_eval] = calls_named(ctx, "eval")
    assert found.for_expression(module_eval.func.value) is obj  # self.ema.module


def test_averaged_model_kinds_and_weight_calls() -> None:
    _, found = objects(
        """
from torch.optim import swa_utils as su
from lightning.pytorch.callbacks import WeightAveraging, StochasticWeightAveraging

fn = su.get_ema_multi_avg_fn(0.999)
ema = su.AveragedModel(model, multi_avg_fn=fn)
swa = su.AveragedModel(model)
swa_fn = su.AveragedModel(model, avg_fn=su.get_swa_avg_fn())
custom = su.AveragedModel(model, avg_fn=my_average)
cb = WeightAveraging(avg_fn=su.get_ema_avg_fn(0.99))
lightning_swa = StochasticWeightAveraging(swa_lrs=1e-2)
"""
    )
    assert by_name(found, "ema").kind is Method.EMA
    assert by_name(found, "ema").weight_call.spec.short_name == "get_ema_multi_avg_fn"
    assert by_name(found, "swa").kind is Method.SWA
    assert by_name(found, "swa_fn").kind is Method.SWA
    assert by_name(found, "custom").kind is Method.UNKNOWN
    assert by_name(found, "cb").kind is Method.EMA
    assert by_name(found, "lightning_swa").kind is Method.SWA
    # The EMA function is part of its AveragedModel, not an object of its own.
    assert len(found.objects) == 6


def test_hand_made_shadows_by_name_and_by_update() -> None:
    _, found = objects(
        """
import copy
from copy import deepcopy

model_ema = copy.deepcopy(model).eval()
backbone = deepcopy(model)
frozen = deepcopy(model)
merged = deepcopy(model)
for e, p in zip(merged.parameters(), other.parameters()):
    e.data.mul_(0.5).add_(p.data, alpha=0.5)

def momentum_update(frozen, model):
    for e, p in zip(frozen.parameters(), model.parameters()):
        e.data.mul_(0.999).add_(p.data, alpha=0.001)

momentum_update(frozen, model)
shadow = {k: v.clone() for k, v in model.state_dict().items()}
for k, v in model.state_dict().items():
    shadow[k] = 0.99 * shadow[k] + 0.01 * v
"""
    )
    # ``merged`` is updated in place by an update nothing names as an average (model
    # merging looks the same): not an averaging object. ``frozen`` is, through the function
    # named for a momentum update.
    names = sorted(n for o in found.objects for n in o.names)
    assert names == ["frozen", "model_ema", "shadow"]
    frozen = by_name(found, "frozen")
    assert frozen.hand_made and len(frozen.inplace) == 1
    assert frozen.reasons == ["target of an in-place average update"]
    assert by_name(found, "shadow").inplace


def test_uses_teacher_target_and_not_weights() -> None:
    _, found = objects(
        """
import copy
import optax
import tensorflow as tf
import torch.nn.functional as F
from timm.utils import ModelEmaV2
from stable_baselines3.common.utils import polyak_update

momentum_encoder = ModelEmaV2(encoder, decay=0.99)
target_net = copy.deepcopy(q_net)
grads = optax.ema(0.9)
loss_avg = tf.train.ExponentialMovingAverage(0.9)
averages = tf.train.ExponentialMovingAverage(0.9)
op = averages.apply(losses)
var_avg = tf.train.ExponentialMovingAverage(0.9999)
var_op = var_avg.apply(tf.trainable_variables())
polyak_update(q.parameters(), tq.parameters(), 0.005)
soft = optax.incremental_update(params, slow_params, 0.01)
ema_params = optax.incremental_update(params, ema_params, 0.001)
mean = ModelEmaV2(model, decay=0.999)


def training_step(x, y):
    with torch.no_grad():
        t = mean(x)
    loss = F.cross_entropy(model(x), y) + consistency(model(x), t)
    loss.backward()


def validate(x, y):
    plain = ModelEmaV2(model)
    return F.cross_entropy(plain(x), y)
"""
    )
    assert by_name(found, "momentum_encoder").use is Use.TEACHER
    assert by_name(found, "target_net").use is Use.TARGET
    assert by_name(found, "grads").use is Use.NOT_WEIGHTS
    assert by_name(found, "loss_avg").use is Use.NOT_WEIGHTS
    assert by_name(found, "averages").use is Use.NOT_WEIGHTS
    assert by_name(found, "var_avg").use is Use.EVAL
    polyak = [o for o in found.objects if o.spec and o.spec.short_name == "polyak_update"]
    assert polyak[0].use is Use.TARGET
    assert by_name(found, "slow_params").use is Use.UNKNOWN
    assert by_name(found, "ema_params").use is Use.EVAL
    assert by_name(found, "mean").use is Use.TEACHER
    assert by_name(found, "plain").use is Use.EVAL


def test_weight_reassigned_and_keras_switch() -> None:
    _, found = objects(
        """
import keras
from ema_pytorch import EMA

ema = EMA(model, beta=0.99)
ema.beta = schedule[0]
on = keras.optimizers.Adam(use_ema=True)
off = keras.optimizers.Adam(ema_momentum=0.5)
"""
    )
    assert by_name(found, "ema").weight_reassigned
    assert [o.names for o in found.objects if o.spec.library == "Keras"] == [["on"]]


def test_mapping_objects_and_hook_targets() -> None:
    _, found = objects(
        "custom_hooks = [dict(type='EMAHook', ema_type='ExpMomentumEMA', momentum=1e-4)]\n"
        "swa = dict(type='EMAHook', ema_type='StochasticWeightAverage')\n"
    )
    ema, swa = found.objects
    assert ema.virtual and ema.spec.qualname == "mmdet.models.layers.ExpMomentumEMA"
    assert swa.kind is Method.SWA


def test_name_tokens() -> None:
    assert tokens("self.modelEMA") == ["model", "ema"]
    assert is_averaged_name("model_ema") and is_averaged_name("ema") and is_averaged_name("avg_net")
    assert is_averaged_name("momentum_encoder") and is_averaged_name("target_q")
    assert not is_averaged_name("schema") and not is_averaged_name("cinema_model")


def test_hand_written_updates_of_weights_and_of_other_things() -> None:
    from ema_lint.analysis.objects.updates import InPlaceUpdates

    ctx, found = objects(
        """
import copy

ema = copy.deepcopy(model).requires_grad_(False)
loss_ema = copy.deepcopy(model)
params_ema = [p.detach().clone() for p in model.parameters()]
for e, p in zip(ema.parameters(), model.parameters()):
    e.mul_(0.999).add_(p, alpha=0.001)
for e, p in zip(params_ema, model.parameters()):
    e.mul_(0.999).add_(p, alpha=0.001)
for name, p in model.named_parameters():
    exp_avg[name].mul_(0.9).add_(p.grad, alpha=0.1)
for p, e in zip(model.parameters(), ema.parameters()):
    p.mul_(0.5).add_(e, alpha=0.5)
for e, p in zip(loss_ema.parameters(), model.parameters()):
    e.mul_(0.9).add_(p, alpha=0.1)
buf.mul_(momentum).add_(grad)

def update_model_with_ema(model, ema_model):
    for p, e in zip(model.parameters(), ema_model.parameters()):
        p.mul_(0.1).add_(e, alpha=0.9)
"""
    )
    updates = ctx.get(InPlaceUpdates).updates
    verdicts = [found.averages_weights(u) for u in updates]
    # ema, a list of copies, Adam-like gradient average, the live model pulled toward the
    # average, a loss average by name, SGD momentum, the live model pulled toward an average
    # that the module never binds.
    assert verdicts == [True, True, False, False, False, False, False]
    ema = by_name(found, "ema")
    assert found.of_update(updates[0]) is ema
    assert found.of_update(updates[1]).names == ["params_ema"]
    assert found.of_update(updates[2]) is None
    assert ema.module_copy and found.parameters_frozen(ema) is True


def test_parameters_frozen() -> None:
    _, found = objects(
        """
import copy

ema_plain = copy.deepcopy(model)
ema_later = copy.deepcopy(model)
ema_later.requires_grad_(False)
ema_looped = copy.deepcopy(model)
for p in ema_looped.parameters():
    p.requires_grad = False
ema_called = copy.deepcopy(model)
for p in ema_called.parameters():
    p.requires_grad_(False)
ema_shadow = {k: v.clone() for k, v in model.state_dict().items()}
for k, v in model.state_dict().items():
    ema_shadow[k] = 0.99 * ema_shadow[k] + 0.01 * v
"""
    )
    names = {n: o for o in found.objects for n in o.names}
    assert found.parameters_frozen(names["ema_plain"]) is False
    assert found.parameters_frozen(names["ema_later"]) is True
    assert found.parameters_frozen(names["ema_looped"]) is True
    assert found.parameters_frozen(names["ema_called"]) is True
    assert found.parameters_frozen(names["ema_shadow"]) is None


def test_attributes_of_instances_of_the_module_classes() -> None:
    ctx, found = objects(
        """
import copy

class ModelEMA:
    def __init__(self, model):
        self.ema = copy.deepcopy(model).eval()

trainer_ema = ModelEMA(model)
trainer_ema.ema.eval()
"""
    )
    [obj] = found.objects
    [call] = calls_named(ctx, "eval")[1:]
    assert found.for_expression(call.func.value) is obj


def test_updates_must_be_named_as_averages_unless_an_api_makes_them() -> None:
    from ema_lint.analysis.objects.updates import InPlaceUpdates

    ctx, found = objects(
        """
import copy

def interpolate(model_a, model_b, t):
    merged = copy.deepcopy(model_a)
    for m, b in zip(merged.parameters(), model_b.parameters()):
        m.mul_(1 - t).add_(b, alpha=t)

def step(avg_model, model):
    for a, p in zip(avg_model.parameters(), model.parameters()):
        a.mul_(0.99).add_(p, alpha=0.01)

avg_model = copy.deepcopy(model)
step(avg_model, model)

def _momentum_update_key_encoder(encoder_q, encoder_k):
    for q, k in zip(encoder_q.parameters(), encoder_k.parameters()):
        k.mul_(0.99).add_(q, alpha=0.01)

def helper(a, b):
    for x, y in zip(a.parameters(), b.parameters()):
        x.mul_(0.99).add_(y, alpha=0.01)
"""
    )
    verdicts = [found.averages_weights(u) for u in ctx.get(InPlaceUpdates).updates]
    # Merging is not an average; a deepcopy named avg is; so is a function named for a
    # momentum update; an anonymous helper is not judged.
    assert verdicts == [False, True, True, False]


def test_names_an_average_and_the_trigger_group_agree() -> None:
    from ema_lint.analysis.objects.averaging import names_an_average
    from ema_lint.analysis.objects.triggers import UPDATE_EVIDENCE
    from ema_lint.prefilter import PreFilter
    from ema_lint.rule import Rule

    class Probe(Rule):
        code = "EMA997"
        name = "probe"
        triggers = ()
        trigger_groups = UPDATE_EVIDENCE.groups

    prefilter = PreFilter([Probe])
    for name in (
        "ema",
        "model_ema",
        "modelEMA",
        "EmaModel",
        "v2ema",
        "self.shadow[k]",
        "polyak_update",
        "Teacher",
        "_momentum_update_key_encoder",
        "soft_update",
    ):
        assert names_an_average(name), name
        for before in (" ", "(", ".", "[", "\n", "*", "_"):
            text = f"for p in x.parameters(): pass\n{before}{name} = 1\n"
            assert prefilter.matches(text), (name, before)
    for name in ("remaining", "schema", "exp_avg", "swap", "merged", "encoder_k"):
        assert not names_an_average(name), name


def test_deepcopy_under_another_name_makes_a_hand_made_copy() -> None:
    _, found = objects(
        "from copy import deepcopy as dc\nimport copy as cp\n"
        "ema = dc(model)\nshadow = cp.deepcopy(model)\nother = dc(model)\n"
    )
    assert sorted(n for o in found.objects for n in o.names) == ["ema", "shadow"]


def test_a_copy_averaged_by_a_helper_of_the_module() -> None:
    """A copy named as averaged, passed to a helper whose arithmetic is an average (a
    decay and its complement between two models), is an averaging object made where its
    name is bound; a helper also given a plain model updates the copy only where a call
    passes the copy."""
    ctx, found = objects(
        """
def accumulate(model1, model2, decay=0.999):
    par1 = dict(model1.named_parameters())
    par2 = dict(model2.named_parameters())
    for k in par1.keys():
        par1[k].data.mul_(decay).add_(par2[k].data, alpha=1 - decay)

def train(loader, generator, g_ema, other):
    for batch in loader:
        accumulate(g_ema, generator, 0.999)
        accumulate(other, generator, 0.5)

def main(make):
    generator = make()
    g_ema = make().eval()
    accumulate(g_ema, generator, 0)
    train([], generator, g_ema, make())
"""
    )
    obj = by_name(found, "g_ema")
    assert ctx.code(obj.creation) == "make().eval()"
    updates = calls_named(ctx, "accumulate")
    assert obj.updates == [updates[0], updates[2]]
    assert len(obj.inplace) == 1


def test_an_attribute_made_twice_by_one_api_is_updated_by_its_calls() -> None:
    ctx, found = objects(
        """
from timm.utils import ModelEmaV2

class Trainer:
    def setup(self, model):
        self.ema = ModelEmaV2(model)

    def resume(self, model):
        self.ema = ModelEmaV2(model)

    def step(self, model):
        self.ema.update(model)
"""
    )
    [update] = calls_named(ctx, "update")
    assert len(found.objects) == 2
    assert all(o.updates == [update] for o in found.objects)


def test_a_helper_over_two_sequences_by_its_names_or_its_callers() -> None:
    ctx, found = objects(
        """
import copy

def blend(xs, ys, k):
    for x, y in zip(xs, ys):
        x.mul_(k).add_(y, alpha=1 - k)

def sync(target, source, k):
    for t, s in zip(target, source):
        t.mul_(k).add_(s, alpha=1 - k)

def merge(xs, ys, w):
    for x, y in zip(xs, ys):
        x.mul_(w).add_(y, alpha=1 - w)

def average(meters, values, k):
    for m, v in zip(meters, values):
        m.mul_(k).add_(v, alpha=1 - k)

def train(model, other, loader, meters):
    ema_model = copy.deepcopy(model)
    for x in loader:
        blend(ema_model.parameters(), model.parameters(), 0.9)
        sync(list(other.parameters()), list(model.parameters()), 0.999)
        average(meters, [x.sum()], 0.9)
    merge(ema_model.parameters(), other.parameters(), 0.5)
"""
    )
    obj = by_name(found, "ema_model")
    assert [found.shadow_name(u) for u in obj.inplace] == ["ema_model"]
    assert found.passed_weights(calls_named(ctx, "blend")[0].args[0].value) is obj
    # Named by its parameters: the shadow is the helper's own parameter.
    assert [o.names for o in found.objects if o is not obj] == [["target"]]
    # Called once outside the loop (merge), or given losses (a meter): no average.
    judged = {
        found.shadow_name(u): found.averages_weights(u) for o in found.objects for u in o.inplace
    }
    assert judged == {"ema_model": True, "target": True}


def test_copies_handed_out_by_a_getter_refer_to_the_api_object() -> None:
    ctx, found = objects(
        """
from training.phema import PowerFunctionEMA, TraditionalEMA

ema = PowerFunctionEMA(net=net, stds=[0.05, 0.1])
for ema_net, suffix in ema.get():
    ema_net(x)
pairs = ema.get()
for copy_net, tag in pairs:
    copy_net(x)
    tag(x)
single = TraditionalEMA(net)
averaged = single.get()
averaged(x)
for whole in ema.get():
    whole(x)
"""
    )
    power = by_name(found, "ema")
    single = by_name(found, "single")
    called = {ctx.code(c.func): found.for_expression(c.func) for c in ctx.nodes(cst.Call)}
    assert called["ema_net"] is power
    assert called["copy_net"] is power
    assert called["averaged"] is single
    # The suffix of a pair, and a pair itself, are not the copy.
    assert called["tag"] is None
    assert called["whole"] is None


_TRAINED_COPY = """
import copy

def step(xs, ys, k):
    for x, y in zip(xs, ys):
        x.mul_(k).add_(y, alpha=1 - k)

def train(net, loader, optimizer):
    twin = copy.deepcopy(net)
    for batch in loader:
        net(batch).mean().backward()
        optimizer.step()
        step(twin.parameters(), CALLED.parameters(), 0.999)
"""


def test_neutral_helper_averaging_a_copy_of_the_trained_model() -> None:
    from ema_lint.analysis.objects.updates import InPlaceUpdates

    ctx, found = objects(_TRAINED_COPY.replace("CALLED", "net"))
    twin = by_name(found, "twin")
    (update,) = ctx.get(InPlaceUpdates).updates
    assert twin.use is Use.EVAL and update in twin.inplace
    assert found.averages_weights(update)


def test_neutral_helper_not_toward_the_trained_model_is_no_average() -> None:
    # The live side is another model than the one the copy was made from.
    _, found = objects(_TRAINED_COPY.replace("CALLED", "other"))
    assert found.objects == []
    # The loop trains nothing.
    _, found = objects(
        _TRAINED_COPY.replace("CALLED", "net")
        .replace(".backward()", "")
        .replace("optimizer.step()", "pass")
    )
    assert found.objects == []
