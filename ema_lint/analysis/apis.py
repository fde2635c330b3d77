"""THE table of weight-averaging APIs: what each argument means, as data.

The parameter name says nothing reliable about semantics (``momentum`` is the weight on the
old average in DINO and Keras, on the new value in mmengine), so every judgement keys on the
resolved API. Adding a library is adding an entry here; no rule has per-library code.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst


class Side(str, enum.Enum):
    """Which side of ``avg <- D*avg + (1-D)*new`` the argument weighs."""

    OLD = "decay"  # the argument is D
    NEW = "momentum"  # the argument is M = 1 - D


class Role(str, enum.Enum):
    EMA_MODEL = "ema-model"  # holds an averaged copy of the weights, updated with a decay
    EMA_AVG_FN = "ema-avg-fn"  # builds an EMA averaging function for AveragedModel
    SWA_MODEL = "swa-model"  # AveragedModel: equal average unless given an EMA function
    SWA_AVG_FN = "swa-avg-fn"
    SWA_SCHEDULER = "swa-scheduler"
    BN_UPDATE = "bn-update"
    EMA_CALLBACK = "ema-callback"  # framework callback that averages for you
    SWA_CALLBACK = "swa-callback"
    EMA_HOOK = "ema-hook"  # mmengine EMAHook: kwargs go to its ema_type
    OPTIMIZER = "optimizer"  # optimizers with built-in EMA (Keras use_ema)
    EMA_FUNCTION = "ema-function"  # functional update (optax.incremental_update)
    GRADIENT_EMA = "gradient-ema"  # averages updates/gradients, never weights


@dataclass(frozen=True)
class Weight:
    """The argument that sets the averaging weight."""

    param: str
    side: Side
    default: float | None = None
    # How a warmup turns the value into a ceiling; empty when the value is used as is.
    ramp: str = ""
    # The ramp applies only when this argument has this value (e.g. use_warmup=True).
    ramp_when: tuple[str, object] | None = None


@dataclass(frozen=True)
class Interval:
    """The argument that makes the object average only every N-th update call."""

    param: str
    default: int = 1


@dataclass(frozen=True)
class ApiSpec:
    qualname: str
    role: Role
    # Positional-or-keyword parameters in order (without self), then keyword-only ones.
    params: tuple[str, ...] = ()
    kwonly: tuple[str, ...] = ()
    var_kwargs: bool = False
    weight: Weight | None = None
    interval: Interval | None = None
    device: str | None = None
    dtype: str | None = None
    # Whether buffers (BatchNorm statistics) are averaged: "yes", "no", "copied", or the
    # name of the argument that decides it (with its default after a colon).
    buffers: str = ""
    eval_on_init: bool = False
    update_methods: tuple[str, ...] = ()
    apply_methods: tuple[str, ...] = ()
    store_methods: tuple[str, ...] = ()
    restore_methods: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    docs: str = ""
    notes: str = ""

    @property
    def all_params(self) -> tuple[str, ...]:
        return self.params + self.kwonly

    def position_of(self, param: str) -> int | None:
        try:
            return self.params.index(param)
        except ValueError:
            return None


@dataclass(eq=False)
class BoundCall:
    """A call matched to an API: each parameter name mapped to the argument that sets it."""

    spec: ApiSpec
    call: cst.Call
    qualname: str
    args: dict[str, cst.Arg] = field(default_factory=dict)
    # True when *args/**kwargs make the binding incomplete: absent means "unknown", not default.
    has_star: bool = False

    def arg(self, param: str) -> cst.Arg | None:
        return self.args.get(param)

    def value(self, param: str) -> cst.BaseExpression | None:
        arg = self.args.get(param)
        return None if arg is None else arg.value

    def is_default(self, param: str) -> bool:
        """The parameter is certainly left at its default."""
        return param not in self.args and not self.has_star


_TORCH_SWA = "https://pytorch.org/docs/stable/optim.html#weight-averaging-swa-and-ema"

API_SPECS: tuple[ApiSpec, ...] = (
    # torch.optim.swa_utils ---------------------------------------------------------------
    ApiSpec(
        "torch.optim.swa_utils.AveragedModel",
        Role.SWA_MODEL,
        params=("model", "device", "avg_fn", "multi_avg_fn", "use_buffers"),
        device="device",
        buffers="use_buffers:False",
        update_methods=("update_parameters",),
        aliases=("torch.optim.AveragedModel",),
        docs=_TORCH_SWA,
        notes="Equal-weight mean unless avg_fn/multi_avg_fn is an EMA function; copy-first; "
        "keeps the source's train mode; buffers copied unless use_buffers=True.",
    ),
    ApiSpec(
        "torch.optim.swa_utils.get_ema_multi_avg_fn",
        Role.EMA_AVG_FN,
        params=("decay",),
        weight=Weight("decay", Side.OLD, 0.999),
        docs=_TORCH_SWA,
    ),
    ApiSpec(
        "torch.optim.swa_utils.get_ema_avg_fn",
        Role.EMA_AVG_FN,
        params=("decay",),
        weight=Weight("decay", Side.OLD, 0.999),
        docs=_TORCH_SWA,
    ),
    ApiSpec("torch.optim.swa_utils.get_swa_multi_avg_fn", Role.SWA_AVG_FN, docs=_TORCH_SWA),
    ApiSpec("torch.optim.swa_utils.get_swa_avg_fn", Role.SWA_AVG_FN, docs=_TORCH_SWA),
    ApiSpec(
        "torch.optim.swa_utils.SWALR",
        Role.SWA_SCHEDULER,
        params=("optimizer", "swa_lr", "anneal_epochs", "anneal_strategy", "last_epoch"),
        docs=_TORCH_SWA,
    ),
    ApiSpec(
        "torch.optim.swa_utils.update_bn",
        Role.BN_UPDATE,
        params=("loader", "model", "device"),
        docs=_TORCH_SWA,
    ),
    # timm ------------------------------------------------------------------------------------
    ApiSpec(
        "timm.utils.ModelEma",
        Role.EMA_MODEL,
        params=("model", "decay", "device", "resume"),
        weight=Weight("decay", Side.OLD, 0.9999),
        device="device",
        buffers="yes",
        eval_on_init=True,
        update_methods=("update",),
        aliases=("timm.utils.model_ema.ModelEma",),
        docs="https://huggingface.co/docs/timm/reference/utils",
    ),
    ApiSpec(
        "timm.utils.ModelEmaV2",
        Role.EMA_MODEL,
        params=("model", "decay", "device"),
        weight=Weight("decay", Side.OLD, 0.9999),
        device="device",
        buffers="yes",
        eval_on_init=True,
        update_methods=("update",),
        apply_methods=("set",),
        aliases=("timm.utils.model_ema.ModelEmaV2",),
        docs="https://huggingface.co/docs/timm/reference/utils",
    ),
    ApiSpec(
        "timm.utils.ModelEmaV3",
        Role.EMA_MODEL,
        params=(
            "model",
            "decay",
            "min_decay",
            "update_after_step",
            "use_warmup",
            "warmup_gamma",
            "warmup_power",
            "device",
            "dtype",
            "stochastic_rounding",
            "foreach",
            "exclude_buffers",
        ),
        weight=Weight(
            "decay",
            Side.OLD,
            0.9999,
            ramp="1-(1+t/warmup_gamma)^-warmup_power, when update() is given step=",
            ramp_when=("use_warmup", True),
        ),
        device="device",
        dtype="dtype",
        buffers="exclude_buffers:False",
        eval_on_init=True,
        update_methods=("update",),
        apply_methods=("set",),
        aliases=("timm.utils.model_ema.ModelEmaV3",),
        docs="https://huggingface.co/docs/timm/reference/utils",
    ),
    # diffusers -------------------------------------------------------------------------------
    ApiSpec(
        "diffusers.training_utils.EMAModel",
        Role.EMA_MODEL,
        params=(
            "parameters",
            "decay",
            "min_decay",
            "update_after_step",
            "use_ema_warmup",
            "inv_gamma",
            "power",
            "foreach",
            "model_cls",
            "model_config",
        ),
        var_kwargs=True,
        weight=Weight(
            "decay",
            Side.OLD,
            0.9999,
            ramp="min(decay, (1+s)/(10+s)), or 1-(1+s/inv_gamma)^-power with use_ema_warmup",
        ),
        buffers="no",
        update_methods=("step",),
        apply_methods=("copy_to",),
        store_methods=("store",),
        restore_methods=("restore",),
        docs="https://huggingface.co/docs/diffusers/main/en/api/training_utils",
    ),
    # ema-pytorch -----------------------------------------------------------------------------
    ApiSpec(
        "ema_pytorch.EMA",
        Role.EMA_MODEL,
        params=(
            "model",
            "ema_model",
            "beta",
            "update_after_step",
            "update_every",
            "inv_gamma",
            "power",
            "min_value",
            "param_or_buffer_names_no_ema",
            "ignore_names",
            "ignore_startswith_names",
            "include_online_model",
            "allow_different_devices",
            "use_foreach",
            "update_model_with_ema_every",
            "update_model_with_ema_beta",
            "forward_method_names",
            "move_ema_to_online_device",
            "coerce_dtype",
            "lazy_init_ema",
        ),
        var_kwargs=False,
        weight=Weight("beta", Side.OLD, 0.9999, ramp="1-(1+step/inv_gamma)^-power, clamped"),
        interval=Interval("update_every", 10),
        buffers="yes",
        update_methods=("update",),
        aliases=("ema_pytorch.ema_pytorch.EMA",),
        docs="https://github.com/lucidrains/ema-pytorch",
    ),
    # torch-ema -------------------------------------------------------------------------------
    ApiSpec(
        "torch_ema.ExponentialMovingAverage",
        Role.EMA_MODEL,
        params=("parameters", "decay", "use_num_updates"),
        weight=Weight(
            "decay",
            Side.OLD,
            None,
            ramp="min(decay, (1+n)/(10+n))",
            ramp_when=("use_num_updates", True),
        ),
        buffers="no",
        update_methods=("update",),
        apply_methods=("copy_to",),
        store_methods=("store",),
        restore_methods=("restore",),
        aliases=("torch_ema.ema.ExponentialMovingAverage",),
        docs="https://github.com/fadel/pytorch_ema",
    ),
)


class ApiTable:
    """Lookup of specs by any of their qualified names."""

    def __init__(self, specs: Iterable[ApiSpec]) -> None:
        self.specs = tuple(specs)
        self.by_name: dict[str, ApiSpec] = {}
        for spec in self.specs:
            for name in (spec.qualname, *spec.aliases):
                self.by_name[name] = spec

    def get(self, qualname: str) -> ApiSpec | None:
        return self.by_name.get(qualname)

    def names(self) -> set[str]:
        return set(self.by_name)

    def short_names(self) -> set[str]:
        """The last component of every name: what a file must contain to use the API."""
        return {name.rsplit(".", 1)[-1] for name in self.by_name}


API_TABLE = ApiTable(API_SPECS)


def bind_arguments(spec: ApiSpec, call: cst.Call, qualname: str | None = None) -> BoundCall:
    """Map a call's arguments to the spec's parameter names."""
    bound = BoundCall(spec, call, qualname or spec.qualname)
    position = 0
    for arg in call.args:
        if arg.star:
            bound.has_star = True
            continue
        if arg.keyword is not None:
            bound.args[arg.keyword.value] = arg
            continue
        if position < len(spec.params):
            bound.args[spec.params[position]] = arg
        position += 1
    return bound
