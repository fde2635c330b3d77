"""The API table as data: integrity, lookups, binding, semantics."""

from __future__ import annotations

import math

import libcst as cst
import pytest

from ema_lint.analysis.objects.apis import (
    API_SPECS,
    API_TABLE,
    REQUIRED,
    Ramp,
    RampKind,
    Role,
    Side,
    bind_arguments,
    semantics_table,
)


def test_every_weight_and_interval_is_a_parameter_with_its_default() -> None:
    for spec in API_SPECS:
        for name in spec.defaults:
            assert name in spec.all_params, (spec.qualname, name)
        if spec.weight is not None:
            assert spec.weight.param in spec.all_params, spec.qualname
            declared = spec.defaults.get(spec.weight.param)
            if spec.weight.default is None:
                assert declared in (None, REQUIRED), spec.qualname
            else:
                assert declared == spec.weight.default, spec.qualname
            for ramp in spec.weight.ramps:
                for parameter, _ in (ramp.gamma, ramp.power):
                    assert not parameter or parameter in spec.all_params, spec.qualname
                if ramp.when is not None:
                    assert ramp.when[0] in spec.all_params, spec.qualname
        if spec.interval is not None:
            assert spec.interval.param in spec.all_params, spec.qualname
        for name in (spec.device, spec.dtype, spec.stochastic_rounding, spec.source, spec.shadow):
            assert name is None or name in spec.all_params, (spec.qualname, name)


def test_lookups_by_every_path_and_registry_name() -> None:
    for name in (
        "lightning.pytorch.callbacks.EMAWeightAveraging",
        "pytorch_lightning.callbacks.EMAWeightAveraging",
        "pytorch_lightning.callbacks.weight_averaging.WeightAveraging",
        "lightning.pytorch.callbacks.stochastic_weight_avg.StochasticWeightAveraging",
        "timm.utils.model_ema.ModelEmaV3",
        "tensorflow.keras.optimizers.AdamW",
        "tensorflow.train.ExponentialMovingAverage",
        "utils.torch_utils.ModelEMA",
        "flax.nnx.training.ema.EMA",
    ):
        assert API_TABLE.get(name) is not None, name
    assert API_TABLE.registered("EMAHook").qualname == "mmengine.hooks.EMAHook"
    assert API_TABLE.registered("mmdet.ExpMomentumEMA").qualname.startswith("mmdet.")
    assert API_TABLE.registered("mmyolo.ExpMomentumEMA").qualname.startswith("mmyolo.")
    assert API_TABLE.registered("NoSuchHook") is None


@pytest.mark.parametrize(
    ("qualname", "params"),
    [
        (
            "torch.optim.swa_utils.SWALR",
            ("optimizer", "swa_lr", "anneal_epochs", "anneal_strategy", "last_epoch"),
        ),
        ("torch.optim.swa_utils.update_bn", ("loader", "model", "device")),
        (
            "torch.optim.swa_utils.AveragedModel",
            ("model", "device", "avg_fn", "multi_avg_fn", "use_buffers"),
        ),
        (
            "lightning.pytorch.callbacks.StochasticWeightAveraging",
            (
                "swa_lrs",
                "swa_epoch_start",
                "annealing_epochs",
                "annealing_strategy",
                "avg_fn",
                "device",
            ),
        ),
        ("lightning.pytorch.callbacks.WeightAveraging", ("device", "use_buffers")),
        (
            "lightning.pytorch.callbacks.EMAWeightAveraging",
            (
                "device",
                "use_buffers",
                "decay",
                "update_every_n_steps",
                "update_starting_at_step",
                "update_starting_at_epoch",
            ),
        ),
        (
            "mmengine.model.StochasticWeightAverage",
            ("model", "interval", "device", "update_buffers"),
        ),
    ],
)
def test_exact_parameter_lists_for_keyword_checks(qualname: str, params: tuple) -> None:
    spec = API_TABLE.get(qualname)
    assert spec is not None and spec.params == params


def test_wrong_keywords_are_recorded() -> None:
    swalr = API_TABLE.get("torch.optim.swa_utils.SWALR")
    call = cst.parse_expression("SWALR(opt, swa_lrs=0.05, annealing_epochs=5)")
    bound = bind_arguments(swalr, call)
    assert bound.unknown_keywords == ["swa_lrs", "annealing_epochs"]
    lightning = API_TABLE.get("lightning.pytorch.callbacks.StochasticWeightAveraging")
    bound = bind_arguments(lightning, cst.parse_expression("SWA(swa_lr=1e-2)"))
    assert bound.unknown_keywords == ["swa_lr"]


def test_positional_binding_and_stars() -> None:
    spec = API_TABLE.get("timm.utils.ModelEmaV3")
    bound = bind_arguments(spec, cst.parse_expression("E(model, 0.999, device='cpu')"))
    assert cst.Module([]).code_for_node(bound.value("decay")) == "0.999"
    assert bound.is_default("use_warmup")
    starred = bind_arguments(spec, cst.parse_expression("E(model, **kw)"))
    assert starred.has_star and not starred.is_default("decay")


def test_semantics_sides() -> None:
    assert API_TABLE.get("mmengine.model.ExponentialMovingAverage").weight.side is Side.NEW
    assert API_TABLE.get("keras.optimizers.Adam").weight.side is Side.OLD
    assert API_TABLE.get("keras.optimizers.Adam").weight.enabled_when == ("use_ema", True)
    assert API_TABLE.get("optax.incremental_update").weight.side is Side.NEW
    assert API_TABLE.get("optax.ema").role is Role.GRADIENT_EMA
    assert API_TABLE.get("ema_pytorch.EMA").interval.default == 10


def test_ramps_reach_the_documented_points() -> None:
    num_updates = Ramp(RampKind.NUM_UPDATES)
    assert num_updates.decay_at(0.9999, 8_991, 1, 1) == pytest.approx(0.999, abs=1e-6)
    inv = Ramp(RampKind.INV_GAMMA_POWER)
    assert inv.decay_at(0.9999, 31_600, 1.0, 2 / 3) == pytest.approx(0.999, abs=2e-6)
    assert inv.decay_at(0.9999, 215_400, 1.0, 3 / 4) == pytest.approx(0.9999, abs=1e-6)
    tau = Ramp(RampKind.EXP_TAU)
    assert tau.decay_at(0.9999, 0, 2000, 1) == 0.0
    assert tau.decay_at(0.9999, 1e6, 2000, 1) == pytest.approx(0.9999)
    exp_momentum = Ramp(RampKind.EXP_MOMENTUM)  # mmdet: momentum anneals from ~1 to M
    assert exp_momentum.decay_at(0.9998, 0, 2000, 1) < 0.01
    assert exp_momentum.decay_at(0.9998, 1e6, 2000, 1) == pytest.approx(0.9998)
    anneal = Ramp(RampKind.ANNEAL_MOMENTUM)
    assert anneal.decay_at(0.9998, 100, 100, 1) == pytest.approx(0.5)
    assert math.isclose(anneal.decay_at(0.9998, 1e9, 100, 1), 0.9998)


def test_semantics_table_lists_both_sides() -> None:
    table = semantics_table()
    assert "`mmengine.model.ExponentialMovingAverage`" in table
    assert "weight on the new value" in table and "weight on the old average" in table
    assert "averages gradients, not weights" in table


def test_model_copy_facts_for_the_loop_rules() -> None:
    """Where the averaged model lives, whether it is a module, frozen, unwraps its source."""
    averaged = API_TABLE.get("torch.optim.swa_utils.AveragedModel")
    assert averaged.model_copy == "module" and averaged.is_module
    assert not averaged.frozen_on_init and not averaged.accepts_wrapped
    v3 = API_TABLE.get("timm.utils.ModelEmaV3")
    assert v3.eval_on_init and v3.frozen_on_init and v3.is_module and v3.cpu_documented
    yolo = API_TABLE.get("ultralytics.utils.torch_utils.ModelEMA")
    assert yolo.model_copy == "ema" and not yolo.is_module and yolo.accepts_wrapped
    assert API_TABLE.get("ema_pytorch.EMA").cpu_offload == ("allow_different_devices", True)
    assert API_TABLE.get("mmengine.model.ExponentialMovingAverage").model_copy == "module"
    # Tensor-only APIs hold no model to run.
    assert API_TABLE.get("diffusers.training_utils.EMAModel").model_copy is None
    assert API_TABLE.get("torch_ema.ExponentialMovingAverage").model_copy is None
