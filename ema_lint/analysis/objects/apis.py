"""THE table of weight-averaging APIs: what each argument means, as data.

The parameter name says nothing reliable about semantics (``momentum`` is the weight on the
old average in DINO and Keras, on the new value in mmengine), so every judgement keys on the
resolved API. Adding a library is adding an entry here; no rule has per-library code.

Each entry records, for one API (keyed by its qualified name, with aliases for the other
import paths and the names a config registry knows it by):

- the full parameter list in order (positional-or-keyword, then keyword-only), with the
  defaults that are plain values and the parameters that are required;
- the averaging weight: which argument, on which side of ``avg <- D*avg + (1-D)*new`` it
  sits (``Side.OLD``: it is D, a decay; ``Side.NEW``: it is M = 1 - D, a momentum), its
  default, and the warmup ramps that make it a ceiling (and when they apply);
- the update interval argument, the device and dtype arguments, whether buffers (BatchNorm
  statistics) are averaged, whether the copy is put in eval mode at construction;
- the method names that update, apply (swap in), store and restore the averaged weights.

Signatures were read from the libraries' sources (torch ``swa_utils.py``, timm
``model_ema.py``, Lightning ``weight_averaging.py`` / ``stochastic_weight_avg.py``,
mmengine ``averaged_model.py`` / ``ema_hook.py``, mmdet/mmyolo ``ema.py``, ultralytics and
yolov5 ``torch_utils.py``, NeMo ``callbacks/ema.py``, Keras optimizers, TensorFlow
``moving_averages.py``, optax, flax ``nnx/training/ema.py``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
    # A warmup schedule of the decay (k-diffusion EMAWarmup): its ``value_methods`` return
    # the decay an update is given; its weight is the ceiling the ramp approaches.
    EMA_SCHEDULE = "ema-schedule"


# Sentinel defaults.
REQUIRED = "<required>"
NOT_NONE = "<not None>"  # a condition: the argument is given and is not None


class RampKind(str, enum.Enum):
    """How a warmup turns the configured value into a ceiling, as a function of the step t."""

    NUM_UPDATES = "num_updates"  # D_t = min(D, (1+t)/(10+t))
    INV_GAMMA_POWER = "inv_gamma_power"  # D_t = min(D, 1-(1+t/gamma)^-power)
    EXP_TAU = "exp_tau"  # D_t = D * (1 - exp(-t/tau))
    EXP_MOMENTUM = "exp_momentum"  # M_t = (1-M) exp(-(1+t)/gamma) + M  (mmdet ExpMomentumEMA)
    ANNEAL_MOMENTUM = "anneal_momentum"  # M_t = max(M, gamma/(gamma+t))  (MomentumAnnealingEMA)
    # EDM2 ``TraditionalEMA``: the half-life in samples is capped at ``gamma`` times the
    # samples seen (t updates of one batch each): D_t = min(D, 0.5^(1/(gamma*t))).
    HALF_LIFE_RAMPUP = "half_life_rampup"


@dataclass(frozen=True)
class Ramp:
    """A warmup of the averaging weight; the configured value is only its ceiling."""

    kind: RampKind
    # Parameters of the ramp: (argument name or "" for a constant, default value).
    gamma: tuple[str, float] = ("", 1.0)
    power: tuple[str, float] = ("", 1.0)
    # The ramp applies only when this argument has this value (REQUIRED/NOT_NONE allowed).
    when: tuple[str, object] | None = None
    # Extra condition that cannot be read from the call, for the docs and messages.
    note: str = ""

    def decay_at(self, ceiling: float, t: float, gamma: float, power: float) -> float:
        """D after ``t`` updates for a ceiling ``ceiling`` (already converted to a decay)."""
        t = max(t, 0.0)
        if self.kind is RampKind.NUM_UPDATES:
            return min(ceiling, (1.0 + t) / (10.0 + t))
        if self.kind is RampKind.INV_GAMMA_POWER:
            return min(ceiling, 1.0 - (1.0 + t / gamma) ** -power)
        if self.kind is RampKind.EXP_TAU:
            return ceiling * (1.0 - math.exp(-t / gamma))
        if self.kind is RampKind.EXP_MOMENTUM:
            m = 1.0 - ceiling
            return 1.0 - ((1.0 - m) * math.exp(-(1.0 + t) / gamma) + m)
        if self.kind is RampKind.ANNEAL_MOMENTUM:
            m = 1.0 - ceiling
            return 1.0 - max(m, gamma / (gamma + t))
        if self.kind is RampKind.HALF_LIFE_RAMPUP:
            if t <= 0.0 or gamma <= 0.0:
                return 0.0
            return min(ceiling, 0.5 ** (1.0 / (gamma * t)))
        raise AssertionError(self.kind)

    def describe(self) -> str:
        g = self.gamma[0] or _number(self.gamma[1])
        p = self.power[0] or _number(self.power[1])
        text = {
            RampKind.NUM_UPDATES: "min(D, (1+t)/(10+t))",
            RampKind.INV_GAMMA_POWER: f"min(D, 1-(1+t/{g})^-{p})",
            RampKind.EXP_TAU: f"D*(1-exp(-t/{g}))",
            RampKind.EXP_MOMENTUM: f"M_t = (1-M)*exp(-(1+t)/{g}) + M",
            RampKind.ANNEAL_MOMENTUM: f"M_t = max(M, {g}/({g}+t))",
            RampKind.HALF_LIFE_RAMPUP: f"half-life at most {g} x the samples seen",
        }[self.kind]
        if self.when is not None:
            param, value = self.when
            shown = " is given" if value == NOT_NONE else f"={value}"
            text += f" when {param}{shown}"
        if self.note:
            text += f" ({self.note})"
        return text


def _number(value: float) -> str:
    return f"{value:g}" if value != 2 / 3 else "2/3"


@dataclass(frozen=True)
class Weight:
    """The argument that sets the averaging weight."""

    param: str
    side: Side
    default: float | None = None
    # Warmups, tried in order: the first whose condition holds applies.
    ramps: tuple[Ramp, ...] = ()
    # The averaging is active only when this argument has this value (Keras use_ema=True).
    enabled_when: tuple[str, object] | None = None
    # The weight is a half-life counted in samples, in units of this many (EDM2
    # ``halflife_Mimg``: 1e6 images), not a decay: the decay per update is ``0.5 ** (batch
    # / (value * per_samples))``, with the batch size the update call passes as
    # ``batch_arg`` (its keyword and position); unknown without it.
    per_samples: float | None = None
    batch_arg: tuple[str, int] = ("batch_size", 1)

    @property
    def ramp(self) -> str:
        """A readable description of the ramps (empty when the value is used as is)."""
        return "; ".join(r.describe() for r in self.ramps)


@dataclass(frozen=True)
class Interval:
    """The argument that makes the object average only every N-th step or update call."""

    param: str
    default: int = 1


# The ``library`` of a spec read from the project's own code: "defined in utils/ema.py".
PROJECT_LIBRARY = "defined in "


@dataclass(frozen=True)
class ApiSpec:
    qualname: str
    role: Role
    # Positional-or-keyword parameters in order (without self), then keyword-only ones.
    params: tuple[str, ...] = ()
    kwonly: tuple[str, ...] = ()
    var_kwargs: bool = False
    # Plain default values (REQUIRED for required parameters).
    defaults: Mapping[str, Any] = field(default_factory=dict)
    weight: Weight | None = None
    interval: Interval | None = None
    device: str | None = None
    dtype: str | None = None
    # Argument that enables stochastic rounding of bfloat16 updates (default True).
    stochastic_rounding: str | None = None
    # Whether buffers (BatchNorm statistics) are averaged: "yes", "no", "copied", or the
    # name of the argument that decides it (with its default after a colon).
    buffers: str = ""
    eval_on_init: bool = False
    # The API itself keeps its copy on the CPU (a project class's ``deepcopy(model).cpu()``
    # in ``__init__``), whatever device the model it copies is on.
    cpu_on_init: bool = False
    # The attribute holding the averaged copy of the model (``ema.module``, ``ema.ema``,
    # ``ema.ema_model``); None when the API keeps only tensors or state, no model to run.
    model_copy: str | None = None
    # The method that hands out the averaged copies to run (EDM2 ``ema.get()``), and whether
    # it returns ``(copy, suffix)`` pairs (``for net, suffix in ema.get():``) rather than
    # the copy itself. The copies are plain deepcopies of the source: they keep its mode
    # (unless ``eval_on_init``) and its dtype.
    copy_getter: str | None = None
    getter_pairs: bool = False
    # The averaged copy is a deepcopy (or the tensors clones) of the source as passed: it
    # has the source's dtype, so a half-precision model gives a half-precision average
    # (unless ``dtype`` sets its own). ``own_copy``: the argument that passes a ready-made
    # copy instead (ema-pytorch ``ema_model=``), whose dtype is its own.
    copies_source: bool = False
    own_copy: str | None = None
    # The object is an ``nn.Module``: a module that stores it as an attribute holds it as a
    # child (its ``.parameters()`` and ``.train()`` reach the copy).
    is_module: bool = False
    # The copy's parameters are made ``requires_grad=False`` at construction.
    frozen_on_init: bool = False
    # The API copies the unwrapped model of a DDP/DataParallel source itself (or is
    # documented to accept a wrapped one); ``accepted_wrappers`` limits that to some
    # wrappers (empty: any).
    accepts_wrapped: bool = False
    accepted_wrappers: tuple[str, ...] = ()
    # A CPU copy is a mode the library documents (timm ``device='cpu'``), or becomes one when
    # this argument has this value (ema-pytorch ``allow_different_devices=True``).
    cpu_documented: bool = False
    cpu_offload: tuple[str, object] | None = None
    update_methods: tuple[str, ...] = ()
    apply_methods: tuple[str, ...] = ()
    store_methods: tuple[str, ...] = ()
    restore_methods: tuple[str, ...] = ()
    # For a schedule (Role.EMA_SCHEDULE): the methods returning the current decay.
    value_methods: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    # Names a config registry (mmengine ``type='...'``) knows the class by.
    registry_names: tuple[str, ...] = ()
    # For hooks that build another averaging class: (argument naming it, default name).
    forwards_to: tuple[str, str] | None = None
    # The argument holding the model (or parameters) that is averaged, and for functional
    # updates the argument holding the averaged copy (the shadow).
    source: str | None = None
    shadow: str | None = None
    # Default use of the averaged weights when names and uses say nothing:
    # "eval" (an evaluation EMA), "target" (RL target network), "teacher" (a momentum
    # encoder: BYOL, MoCo), "unknown".
    default_use: str = "eval"
    library: str = ""
    docs: str = ""
    notes: str = ""
    # A function averaging one leaf (``return e * d + p * (1 - d)``): its calls are uses only
    # inside what a tree map applies to averaged weights.
    elementwise: bool = False
    # The defaults are the library's documented recipe, not judged against the built-in
    # range (ema-pytorch's beta with update_every, Keras's ema_momentum). False for copied
    # helpers whose default every caller overrides (guided-diffusion's ``rate=0.99``).
    recipe_defaults: bool = True

    @property
    def all_params(self) -> tuple[str, ...]:
        return self.params + self.kwonly

    @property
    def in_project(self) -> bool:
        """The spec is read from the project's own code (its summary), not the table."""
        return self.library.startswith(PROJECT_LIBRARY)

    def position_of(self, param: str) -> int | None:
        try:
            return self.params.index(param)
        except ValueError:
            return None

    def default(self, param: str) -> Any:
        """The default of ``param`` (REQUIRED, or None when unknown)."""
        return self.defaults.get(param)

    def accepts(self, keyword: str) -> bool:
        """Whether ``keyword=`` is a valid keyword argument of this API."""
        return keyword in self.params or keyword in self.kwonly or self.var_kwargs

    @property
    def source_param(self) -> str | None:
        """The argument that passes the online model, parameters or tensors."""
        if self.source is not None:
            return self.source
        for name in ("model", "parameters", "params"):
            if name in self.params:
                return name
        return None

    @property
    def short_name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


@dataclass(eq=False)
class BoundCall:
    """A call matched to an API: each parameter name mapped to the argument that sets it.

    ``call`` is the ``cst.Call`` for a real call; for a *virtual* call (a config mapping such
    as ``dict(type='EMAHook', momentum=0.0002)`` that stands for the constructor call) it is
    the mapping node, and the arguments are its keyword ``Arg``s or ``DictElement``s: both
    have ``.value``, which is all rules read.
    """

    spec: ApiSpec
    call: cst.CSTNode
    qualname: str
    args: dict[str, cst.Arg | cst.DictElement] = field(default_factory=dict)
    # True when *args/**kwargs make the binding incomplete: absent means "unknown", not default.
    has_star: bool = False
    virtual: bool = False
    # Keywords the API does not accept (a TypeError at run time, or silently ignored).
    unknown_keywords: list[str] = field(default_factory=list)
    # For hooks that forward their kwargs (mmengine EMAHook): the spec they build.
    target: ApiSpec | None = None

    def arg(self, param: str) -> cst.Arg | cst.DictElement | None:
        return self.args.get(param)

    def value(self, param: str) -> cst.BaseExpression | None:
        arg = self.args.get(param)
        return None if arg is None else arg.value

    def is_default(self, param: str) -> bool:
        """The parameter is certainly left at its default."""
        return param not in self.args and not self.has_star

    @property
    def averaging(self) -> ApiSpec:
        """The spec that defines the averaging (the forwarded one for hooks)."""
        return self.target or self.spec


_TORCH_SWA = "https://pytorch.org/docs/stable/optim.html#weight-averaging-swa-and-ema"
_TIMM = "https://huggingface.co/docs/timm/reference/utils"
_LIGHTNING = "https://lightning.ai/docs/pytorch/stable/advanced/training_tricks.html"
_MMENGINE = "https://mmengine.readthedocs.io/en/latest/api/model.html"
_KERAS = "https://keras.io/api/optimizers/"
_SWAG = "https://github.com/wjmaddox/swa_gaussian"

_NUM_UPDATES = Ramp(RampKind.NUM_UPDATES)


def _lightning(name: str, module: str, **kwargs: Any) -> ApiSpec:
    """A Lightning callback under both package names."""
    aliases = [
        f"pytorch_lightning.callbacks.{name}",
        f"lightning.pytorch.callbacks.{module}.{name}",
        f"pytorch_lightning.callbacks.{module}.{name}",
    ]
    return ApiSpec(
        f"lightning.pytorch.callbacks.{name}",
        aliases=tuple(aliases),
        library="Lightning",
        docs=_LIGHTNING,
        **kwargs,
    )


_KERAS_COMMON = (
    "weight_decay",
    "clipnorm",
    "clipvalue",
    "global_clipnorm",
    "use_ema",
    "ema_momentum",
    "ema_overwrite_frequency",
    "loss_scale_factor",
    "gradient_accumulation_steps",
    "name",
)

_KERAS_OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "Adam": ("learning_rate", "beta_1", "beta_2", "epsilon", "amsgrad"),
    "AdamW": ("learning_rate", "weight_decay", "beta_1", "beta_2", "epsilon", "amsgrad"),
    "SGD": ("learning_rate", "momentum", "nesterov"),
    "RMSprop": ("learning_rate", "rho", "momentum", "epsilon", "centered"),
    "Adagrad": ("learning_rate", "initial_accumulator_value", "epsilon"),
    "Adadelta": ("learning_rate", "rho", "epsilon"),
    "Adamax": ("learning_rate", "beta_1", "beta_2", "epsilon"),
    "Nadam": ("learning_rate", "beta_1", "beta_2", "epsilon"),
    "Lion": ("learning_rate", "beta_1", "beta_2"),
    "Lamb": ("learning_rate", "beta_1", "beta_2", "epsilon"),
    "Adafactor": (
        "learning_rate",
        "beta_2_decay",
        "epsilon_1",
        "epsilon_2",
        "clip_threshold",
        "relative_step",
    ),
    "Ftrl": (
        "learning_rate",
        "learning_rate_power",
        "initial_accumulator_value",
        "l1_regularization_strength",
        "l2_regularization_strength",
        "l2_shrinkage_regularization_strength",
        "beta",
    ),
}


def _keras(name: str, own: tuple[str, ...]) -> ApiSpec:
    params = own + tuple(p for p in _KERAS_COMMON if p not in own)
    prefixes = (
        "tf.keras.optimizers",
        "tensorflow.keras.optimizers",
        "keras.optimizers.experimental",
        "tf.keras.optimizers.experimental",
        "tensorflow.keras.optimizers.experimental",
        "keras.src.optimizers",
    )
    return ApiSpec(
        f"keras.optimizers.{name}",
        Role.OPTIMIZER,
        params=params,
        var_kwargs=True,
        defaults={"use_ema": False, "ema_momentum": 0.99, "ema_overwrite_frequency": None},
        weight=Weight("ema_momentum", Side.OLD, 0.99, enabled_when=("use_ema", True)),
        apply_methods=("finalize_variable_values",),
        aliases=tuple(f"{p}.{name}" for p in prefixes),
        library="Keras",
        docs=_KERAS,
        notes="ema_momentum is the decay (weight on the old average) despite its name; "
        "averaging is on only with use_ema=True; the first step copies.",
    )


def _mm_ema(qualname: str, aliases: tuple[str, ...], registry: tuple[str, ...], **kw) -> ApiSpec:
    """An mmengine-family averaged model: ``momentum`` is the weight on the NEW value."""
    gamma_default = kw.pop("gamma_default", None)
    ramp = kw.pop("ramp", None)
    params = ("model", "momentum", "gamma", "interval", "device", "update_buffers")
    defaults: dict[str, Any] = {
        "model": REQUIRED,
        "momentum": 0.0002,
        "interval": 1,
        "device": None,
        "update_buffers": False,
    }
    if gamma_default is None:
        params = tuple(p for p in params if p != "gamma")
    else:
        defaults["gamma"] = gamma_default
    return ApiSpec(
        qualname,
        Role.EMA_MODEL,
        params=params,
        defaults=defaults,
        weight=Weight("momentum", Side.NEW, 0.0002, ramps=(ramp,) if ramp else ()),
        interval=Interval("interval", 1),
        device="device",
        buffers="update_buffers:False",
        update_methods=("update_parameters",),
        aliases=aliases,
        model_copy="module",
        copies_source=True,
        is_module=True,
        frozen_on_init=True,
        registry_names=registry,
        docs=_MMENGINE,
        **kw,
    )


API_SPECS: tuple[ApiSpec, ...] = (
    # torch.optim.swa_utils ---------------------------------------------------------------
    ApiSpec(
        "torch.optim.swa_utils.AveragedModel",
        Role.SWA_MODEL,
        params=("model", "device", "avg_fn", "multi_avg_fn", "use_buffers"),
        defaults={
            "model": REQUIRED,
            "device": None,
            "avg_fn": None,
            "multi_avg_fn": None,
            "use_buffers": False,
        },
        device="device",
        buffers="use_buffers:False",
        update_methods=("update_parameters",),
        library="PyTorch",
        model_copy="module",
        copies_source=True,
        is_module=True,
        docs=_TORCH_SWA,
        notes="Equal-weight mean unless avg_fn/multi_avg_fn is an EMA function; copy-first; "
        "keeps the source's train mode; buffers copied unless use_buffers=True.",
    ),
    ApiSpec(
        "torch.optim.swa_utils.get_ema_multi_avg_fn",
        Role.EMA_AVG_FN,
        params=("decay",),
        defaults={"decay": 0.999},
        weight=Weight("decay", Side.OLD, 0.999),
        library="PyTorch",
        docs=_TORCH_SWA,
    ),
    ApiSpec(
        "torch.optim.swa_utils.get_ema_avg_fn",
        Role.EMA_AVG_FN,
        params=("decay",),
        defaults={"decay": 0.999},
        weight=Weight("decay", Side.OLD, 0.999),
        library="PyTorch",
        docs=_TORCH_SWA,
    ),
    ApiSpec(
        "torch.optim.swa_utils.get_swa_multi_avg_fn",
        Role.SWA_AVG_FN,
        library="PyTorch",
        docs=_TORCH_SWA,
    ),
    ApiSpec(
        "torch.optim.swa_utils.get_swa_avg_fn", Role.SWA_AVG_FN, library="PyTorch", docs=_TORCH_SWA
    ),
    ApiSpec(
        "torch.optim.swa_utils.SWALR",
        Role.SWA_SCHEDULER,
        params=("optimizer", "swa_lr", "anneal_epochs", "anneal_strategy", "last_epoch"),
        defaults={
            "optimizer": REQUIRED,
            "swa_lr": REQUIRED,
            "anneal_epochs": 10,
            "anneal_strategy": "cos",
            "last_epoch": -1,
        },
        library="PyTorch",
        docs=_TORCH_SWA,
        notes="The docstring says swa_lrs/annealing_epochs/annealing_strategy; the real "
        "keywords are swa_lr/anneal_epochs/anneal_strategy.",
    ),
    ApiSpec(
        "torch.optim.swa_utils.update_bn",
        Role.BN_UPDATE,
        params=("loader", "model", "device"),
        defaults={"loader": REQUIRED, "model": REQUIRED, "device": None},
        library="PyTorch",
        docs=_TORCH_SWA,
    ),
    # SWAG (the original SWA-Gaussian code) --------------------------------------------------
    ApiSpec(
        "swag.posteriors.SWAG",
        Role.SWA_MODEL,
        params=("base", "no_cov_mat", "max_num_models", "var_clamp"),
        var_kwargs=True,
        defaults={"base": REQUIRED, "no_cov_mat": True, "max_num_models": 0, "var_clamp": 1e-30},
        buffers="no",
        update_methods=("collect_model",),
        apply_methods=("sample",),
        aliases=("swag.posteriors.swag.SWAG",),
        model_copy="base",
        is_module=True,
        library="SWAG",
        docs=_SWAG,
        notes="Builds its own model from the class it is given (base(*args, **kwargs)); "
        "collect_model(model) adds the model's parameters to an equal-weight running mean "
        "(and second moment); sample(scale) writes mean + scale * noise into that model, "
        "sample(0.0) the SWA mean. Its BatchNorm statistics are never averaged: "
        "bn_update(loader, swag_model) must follow each sample().",
    ),
    ApiSpec(
        "swag.utils.bn_update",
        Role.BN_UPDATE,
        params=("loader", "model", "verbose", "subset"),
        var_kwargs=True,
        defaults={"loader": REQUIRED, "model": REQUIRED, "verbose": False, "subset": None},
        library="SWAG",
        docs=_SWAG,
    ),
    # timm ------------------------------------------------------------------------------------
    ApiSpec(
        "timm.utils.ModelEma",
        Role.EMA_MODEL,
        params=("model", "decay", "device", "resume"),
        defaults={"model": REQUIRED, "decay": 0.9999, "device": "", "resume": ""},
        weight=Weight("decay", Side.OLD, 0.9999),
        device="device",
        buffers="yes",
        eval_on_init=True,
        update_methods=("update",),
        aliases=("timm.utils.model_ema.ModelEma",),
        model_copy="ema",
        copies_source=True,
        is_module=False,
        frozen_on_init=True,
        cpu_documented=True,
        # It keeps a DataParallel copy's ``module.`` keys in step with the model's; timm's
        # docs say to make it before the DDP wrapper (a copy of DDP is a DDP module).
        accepts_wrapped=True,
        accepted_wrappers=("DataParallel",),
        library="timm",
        docs=_TIMM,
    ),
    ApiSpec(
        "timm.utils.ModelEmaV2",
        Role.EMA_MODEL,
        params=("model", "decay", "device"),
        defaults={"model": REQUIRED, "decay": 0.9999, "device": None},
        weight=Weight("decay", Side.OLD, 0.9999),
        device="device",
        buffers="yes",
        eval_on_init=True,
        update_methods=("update",),
        apply_methods=("set",),
        aliases=("timm.utils.model_ema.ModelEmaV2",),
        model_copy="module",
        copies_source=True,
        is_module=True,
        frozen_on_init=True,
        cpu_documented=True,
        library="timm",
        docs=_TIMM,
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
        defaults={
            "model": REQUIRED,
            "decay": 0.9999,
            "min_decay": 0.0,
            "update_after_step": 0,
            "use_warmup": False,
            "warmup_gamma": 1.0,
            "warmup_power": 2 / 3,
            "device": None,
            "dtype": None,
            "stochastic_rounding": True,
            "foreach": True,
            "exclude_buffers": False,
        },
        weight=Weight(
            "decay",
            Side.OLD,
            0.9999,
            ramps=(
                Ramp(
                    RampKind.INV_GAMMA_POWER,
                    gamma=("warmup_gamma", 1.0),
                    power=("warmup_power", 2 / 3),
                    when=("use_warmup", True),
                    note="only when update() is given step=",
                ),
            ),
        ),
        device="device",
        dtype="dtype",
        stochastic_rounding="stochastic_rounding",
        buffers="exclude_buffers:False",
        eval_on_init=True,
        update_methods=("update",),
        apply_methods=("set",),
        aliases=("timm.utils.model_ema.ModelEmaV3",),
        model_copy="module",
        copies_source=True,
        is_module=True,
        frozen_on_init=True,
        cpu_documented=True,
        library="timm",
        docs=_TIMM,
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
        defaults={
            "parameters": REQUIRED,
            "decay": 0.9999,
            "min_decay": 0.0,
            "update_after_step": 0,
            "use_ema_warmup": False,
            "inv_gamma": 1.0,
            "power": 2 / 3,
            "foreach": False,
            "model_cls": None,
            "model_config": None,
        },
        weight=Weight(
            "decay",
            Side.OLD,
            0.9999,
            ramps=(
                Ramp(
                    RampKind.INV_GAMMA_POWER,
                    gamma=("inv_gamma", 1.0),
                    power=("power", 2 / 3),
                    when=("use_ema_warmup", True),
                ),
                _NUM_UPDATES,
            ),
        ),
        buffers="no",
        update_methods=("step",),
        apply_methods=("copy_to",),
        store_methods=("store",),
        restore_methods=("restore",),
        library="diffusers",
        copies_source=True,
        docs="https://huggingface.co/docs/diffusers/main/en/api/training_utils",
        notes="Always ramps: decay is only the ceiling. Call step() once per optimizer step.",
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
        defaults={
            "model": REQUIRED,
            "ema_model": None,
            "beta": 0.9999,
            "update_after_step": 100,
            "update_every": 10,
            "inv_gamma": 1.0,
            "power": 2 / 3,
            "min_value": 0.0,
            "include_online_model": True,
            "allow_different_devices": False,
            "use_foreach": False,
            "coerce_dtype": False,
            "lazy_init_ema": False,
        },
        weight=Weight(
            "beta",
            Side.OLD,
            0.9999,
            ramps=(
                Ramp(RampKind.INV_GAMMA_POWER, gamma=("inv_gamma", 1.0), power=("power", 2 / 3)),
            ),
        ),
        interval=Interval("update_every", 10),
        buffers="yes",
        update_methods=("update",),
        aliases=("ema_pytorch.ema_pytorch.EMA",),
        model_copy="ema_model",
        copies_source=True,
        own_copy="ema_model",
        is_module=True,
        frozen_on_init=True,
        cpu_offload=("allow_different_devices", True),
        library="ema-pytorch",
        docs="https://github.com/lucidrains/ema-pytorch",
        notes="update() takes no model; averages on every update_every-th call only.",
    ),
    ApiSpec(
        "ema_pytorch.PostHocEMA",
        Role.EMA_MODEL,
        params=(
            "model",
            "ema_model",
            "sigma_rels",
            "gammas",
            "checkpoint_every_num_steps",
            "checkpoint_folder",
        ),
        var_kwargs=True,
        defaults={
            "model": REQUIRED,
            "ema_model": None,
            "sigma_rels": None,
            "gammas": None,
            "checkpoint_every_num_steps": 1000,
        },
        update_methods=("update",),
        aliases=("ema_pytorch.post_hoc_ema.PostHocEMA",),
        library="ema-pytorch",
        docs="https://github.com/lucidrains/ema-pytorch",
        notes="Karras post-hoc EMA: widths are relative standard deviations (sigma_rels), "
        "not decays.",
    ),
    # torch-ema -------------------------------------------------------------------------------
    ApiSpec(
        "torch_ema.ExponentialMovingAverage",
        Role.EMA_MODEL,
        params=("parameters", "decay", "use_num_updates"),
        defaults={"parameters": REQUIRED, "decay": REQUIRED, "use_num_updates": True},
        weight=Weight(
            "decay",
            Side.OLD,
            None,
            ramps=(Ramp(RampKind.NUM_UPDATES, when=("use_num_updates", True)),),
        ),
        buffers="no",
        update_methods=("update",),
        apply_methods=("copy_to", "average_parameters"),
        store_methods=("store",),
        restore_methods=("restore",),
        aliases=("torch_ema.ema.ExponentialMovingAverage",),
        library="torch-ema",
        copies_source=True,
        docs="https://github.com/fadel/pytorch_ema",
    ),
    # Lightning -------------------------------------------------------------------------------
    _lightning(
        "StochasticWeightAveraging",
        "stochastic_weight_avg",
        role=Role.SWA_CALLBACK,
        params=(
            "swa_lrs",
            "swa_epoch_start",
            "annealing_epochs",
            "annealing_strategy",
            "avg_fn",
            "device",
        ),
        defaults={
            "swa_lrs": REQUIRED,
            "swa_epoch_start": 0.8,
            "annealing_epochs": 10,
            "annealing_strategy": "cos",
            "avg_fn": None,
        },
        device="device",
        buffers="copied",
        notes="Builds SWALR from swa_lrs (note the s; torch's SWALR takes swa_lr); runs an "
        "extra epoch to recompute BatchNorm statistics; averaged copy on CPU by default.",
    ),
    _lightning(
        "WeightAveraging",
        "weight_averaging",
        role=Role.SWA_CALLBACK,
        params=("device", "use_buffers"),
        kwonly=("avg_fn", "multi_avg_fn"),
        var_kwargs=True,
        defaults={"device": None, "use_buffers": True, "avg_fn": None, "multi_avg_fn": None},
        device="device",
        buffers="use_buffers:True",
        notes="Extra kwargs go to AveragedModel; updates after optimizer steps (accumulation "
        "safe); swaps the average in for validation.",
    ),
    _lightning(
        "EMAWeightAveraging",
        "weight_averaging",
        role=Role.EMA_CALLBACK,
        params=(
            "device",
            "use_buffers",
            "decay",
            "update_every_n_steps",
            "update_starting_at_step",
            "update_starting_at_epoch",
        ),
        var_kwargs=True,
        defaults={
            "device": None,
            "use_buffers": True,
            "decay": 0.999,
            "update_every_n_steps": 1,
            "update_starting_at_step": None,
            "update_starting_at_epoch": None,
        },
        weight=Weight("decay", Side.OLD, 0.999),
        interval=Interval("update_every_n_steps", 1),
        device="device",
        buffers="use_buffers:True",
    ),
    # mmengine / mmdet / mmyolo ---------------------------------------------------------------
    _mm_ema(
        "mmengine.model.ExponentialMovingAverage",
        ("mmengine.model.averaged_model.ExponentialMovingAverage",),
        ("ExponentialMovingAverage",),
        library="mmengine",
    ),
    _mm_ema(
        "mmengine.model.MomentumAnnealingEMA",
        ("mmengine.model.averaged_model.MomentumAnnealingEMA",),
        ("MomentumAnnealingEMA",),
        gamma_default=100,
        ramp=Ramp(RampKind.ANNEAL_MOMENTUM, gamma=("gamma", 100.0)),
        library="mmengine",
    ),
    _mm_ema(
        "mmdet.models.layers.ExpMomentumEMA",
        ("mmdet.models.layers.ema.ExpMomentumEMA", "mmdet.models.ExpMomentumEMA"),
        ("ExpMomentumEMA", "mmdet.ExpMomentumEMA"),
        gamma_default=2000,
        ramp=Ramp(RampKind.EXP_MOMENTUM, gamma=("gamma", 2000.0)),
        library="mmdet",
    ),
    _mm_ema(
        "mmyolo.models.layers.ExpMomentumEMA",
        ("mmyolo.models.layers.ema.ExpMomentumEMA", "mmyolo.models.ExpMomentumEMA"),
        ("mmyolo.ExpMomentumEMA",),
        gamma_default=2000,
        ramp=Ramp(RampKind.EXP_MOMENTUM, gamma=("gamma", 2000.0)),
        library="mmyolo",
    ),
    ApiSpec(
        "mmengine.model.StochasticWeightAverage",
        Role.SWA_MODEL,
        params=("model", "interval", "device", "update_buffers"),
        defaults={"model": REQUIRED, "interval": 1, "device": None, "update_buffers": False},
        interval=Interval("interval", 1),
        device="device",
        buffers="update_buffers:False",
        update_methods=("update_parameters",),
        aliases=("mmengine.model.averaged_model.StochasticWeightAverage",),
        model_copy="module",
        copies_source=True,
        is_module=True,
        frozen_on_init=True,
        registry_names=("StochasticWeightAverage",),
        library="mmengine",
        docs=_MMENGINE,
    ),
    ApiSpec(
        "mmengine.hooks.EMAHook",
        Role.EMA_HOOK,
        params=(
            "ema_type",
            "strict_load",
            "begin_iter",
            "begin_epoch",
            "evaluate_on_ema",
            "evaluate_on_origin",
        ),
        var_kwargs=True,
        defaults={
            "ema_type": "ExponentialMovingAverage",
            "strict_load": False,
            "begin_iter": 0,
            "begin_epoch": 0,
        },
        aliases=("mmengine.hooks.ema_hook.EMAHook",),
        registry_names=("EMAHook",),
        forwards_to=("ema_type", "ExponentialMovingAverage"),
        library="mmengine",
        docs="https://mmengine.readthedocs.io/en/latest/api/hooks.html",
        notes="kwargs (momentum, interval, update_buffers, gamma) configure ema_type; "
        "swaps the average in for validation.",
    ),
    ApiSpec(
        "mmcv.runner.EMAHook",
        Role.EMA_HOOK,
        params=("momentum", "interval", "warm_up", "resume_from"),
        defaults={"momentum": 0.0002, "interval": 1, "warm_up": 100, "resume_from": None},
        weight=Weight("momentum", Side.NEW, 0.0002),
        interval=Interval("interval", 1),
        aliases=("mmcv.runner.hooks.EMAHook", "mmcv.runner.hooks.ema.EMAHook"),
        library="mmcv",
        docs="https://mmcv.readthedocs.io/en/1.x/api.html",
    ),
    # ultralytics / yolov5 / YOLOX ------------------------------------------------------------
    ApiSpec(
        "ultralytics.utils.torch_utils.ModelEMA",
        Role.EMA_MODEL,
        params=("model", "decay", "tau", "updates"),
        defaults={"model": REQUIRED, "decay": 0.9999, "tau": 2000, "updates": 0},
        weight=Weight(
            "decay", Side.OLD, 0.9999, ramps=(Ramp(RampKind.EXP_TAU, gamma=("tau", 2000.0)),)
        ),
        buffers="yes",
        eval_on_init=True,
        update_methods=("update",),
        apply_methods=("update_attr",),
        aliases=(
            "ultralytics.yolo.utils.torch_utils.ModelEMA",
            "utils.torch_utils.ModelEMA",
            "yolov5.utils.torch_utils.ModelEMA",
        ),
        model_copy="ema",
        copies_source=True,
        frozen_on_init=True,
        accepts_wrapped=True,
        library="ultralytics / yolov5",
        docs="https://docs.ultralytics.com/reference/utils/torch_utils/",
    ),
    ApiSpec(
        "yolox.utils.ModelEMA",
        Role.EMA_MODEL,
        params=("model", "decay", "updates"),
        defaults={"model": REQUIRED, "decay": 0.9999, "updates": 0},
        weight=Weight(
            "decay", Side.OLD, 0.9999, ramps=(Ramp(RampKind.EXP_TAU, gamma=("", 2000.0)),)
        ),
        buffers="yes",
        eval_on_init=True,
        update_methods=("update",),
        aliases=("yolox.utils.ema.ModelEMA",),
        model_copy="ema",
        copies_source=True,
        frozen_on_init=True,
        accepts_wrapped=True,
        library="YOLOX",
        docs="https://github.com/Megvii-BaseDetection/YOLOX",
    ),
    # NeMo ------------------------------------------------------------------------------------
    ApiSpec(
        "nemo.collections.common.callbacks.EMA",
        Role.EMA_CALLBACK,
        params=("decay", "validate_original_weights", "every_n_steps", "cpu_offload"),
        defaults={
            "decay": REQUIRED,
            "validate_original_weights": False,
            "every_n_steps": 1,
            "cpu_offload": False,
        },
        weight=Weight("decay", Side.OLD, None),
        interval=Interval("every_n_steps", 1),
        device="cpu_offload",
        buffers="yes",
        aliases=("nemo.collections.common.callbacks.ema.EMA",),
        cpu_offload=("cpu_offload", True),
        library="NeMo",
        docs="https://docs.nvidia.com/nemo-framework/user-guide/latest/nemotoolkit/",
    ),
    ApiSpec(
        "nemo.collections.common.callbacks.ema.EMAOptimizer",
        Role.OPTIMIZER,
        params=("optimizer", "device", "decay", "every_n_steps", "current_step"),
        defaults={
            "optimizer": REQUIRED,
            "device": REQUIRED,
            "decay": 0.9999,
            "every_n_steps": 1,
            "current_step": 0,
        },
        weight=Weight("decay", Side.OLD, 0.9999),
        interval=Interval("every_n_steps", 1),
        device="device",
        buffers="yes",
        library="NeMo",
    ),
    # TensorFlow / Keras ----------------------------------------------------------------------
    ApiSpec(
        "tf.train.ExponentialMovingAverage",
        Role.EMA_MODEL,
        params=("decay", "num_updates", "zero_debias", "name"),
        defaults={
            "decay": REQUIRED,
            "num_updates": None,
            "zero_debias": False,
            "name": "ExponentialMovingAverage",
        },
        weight=Weight(
            "decay",
            Side.OLD,
            None,
            ramps=(Ramp(RampKind.NUM_UPDATES, when=("num_updates", NOT_NONE)),),
        ),
        update_methods=("apply",),
        apply_methods=("average", "variables_to_restore"),
        aliases=(
            "tensorflow.train.ExponentialMovingAverage",
            "tf.compat.v1.train.ExponentialMovingAverage",
            "tensorflow.compat.v1.train.ExponentialMovingAverage",
            "tensorflow.python.training.moving_averages.ExponentialMovingAverage",
        ),
        library="TensorFlow",
        docs="https://www.tensorflow.org/api_docs/python/tf/train/ExponentialMovingAverage",
        notes="Also averages losses for summaries: what apply() receives says which.",
    ),
    *(_keras(name, own) for name, own in _KERAS_OPTIMIZERS.items()),
    ApiSpec(
        "tensorflow_addons.optimizers.MovingAverage",
        Role.OPTIMIZER,
        params=(
            "optimizer",
            "sequential_update",
            "average_decay",
            "num_updates",
            "start_step",
            "dynamic_decay",
            "name",
        ),
        var_kwargs=True,
        defaults={
            "optimizer": REQUIRED,
            "sequential_update": True,
            "average_decay": 0.99,
            "num_updates": None,
            "start_step": 0,
            "dynamic_decay": False,
            "name": "MovingAverage",
        },
        weight=Weight(
            "average_decay",
            Side.OLD,
            0.99,
            ramps=(
                Ramp(RampKind.NUM_UPDATES, when=("num_updates", NOT_NONE)),
                Ramp(RampKind.NUM_UPDATES, when=("dynamic_decay", True)),
            ),
        ),
        apply_methods=("assign_average_vars", "swap_weights"),
        aliases=(
            "tfa.optimizers.MovingAverage",
            "tensorflow_addons.optimizers.moving_average.MovingAverage",
        ),
        library="TensorFlow Addons",
        docs="https://www.tensorflow.org/addons/api_docs/python/tfa/optimizers/MovingAverage",
        notes="Wraps an optimizer and keeps an EMA of the weights it updates; average_decay is "
        "the decay (weight on the old average); dynamic_decay or num_updates ramp it up as "
        "min(decay, (1 + t) / (10 + t)).",
    ),
    # JAX -------------------------------------------------------------------------------------
    ApiSpec(
        "optax.incremental_update",
        Role.EMA_FUNCTION,
        params=("new_tensors", "old_tensors", "step_size"),
        defaults={"new_tensors": REQUIRED, "old_tensors": REQUIRED, "step_size": REQUIRED},
        weight=Weight("step_size", Side.NEW, None),
        source="new_tensors",
        shadow="old_tensors",
        default_use="unknown",
        library="optax",
        docs="https://optax.readthedocs.io/en/latest/api/utilities.html",
        notes="Returns step_size*new + (1-step_size)*old: step_size is the weight on the new "
        "value (RL target networks call it tau).",
    ),
    ApiSpec(
        "optax.ema",
        Role.GRADIENT_EMA,
        params=("decay", "debias", "accumulator_dtype"),
        defaults={"decay": REQUIRED, "debias": True, "accumulator_dtype": None},
        weight=Weight("decay", Side.OLD, None),
        aliases=("optax.transforms.ema", "optax._src.transform.ema"),
        library="optax",
        docs="https://optax.readthedocs.io/en/latest/api/transformations.html",
        notes="A gradient transformation: averages updates, never weights.",
    ),
    ApiSpec(
        "flax.nnx.EMA",
        Role.EMA_MODEL,
        params=("params", "decay"),
        kwonly=("only", "graph"),
        defaults={"params": REQUIRED, "decay": REQUIRED},
        weight=Weight("decay", Side.OLD, None),
        update_methods=("update",),
        apply_methods=("apply_to",),
        aliases=("flax.nnx.training.ema.EMA",),
        library="flax",
        docs="https://flax.readthedocs.io/en/latest/api_reference/flax.nnx/training/ema.html",
    ),
    # Widely copied research code -------------------------------------------------------------
    ApiSpec(
        "ldm.modules.ema.LitEma",
        Role.EMA_MODEL,
        params=("model", "decay", "use_num_upates"),
        defaults={"model": REQUIRED, "decay": 0.9999, "use_num_upates": True},
        weight=Weight(
            "decay",
            Side.OLD,
            0.9999,
            ramps=(Ramp(RampKind.NUM_UPDATES, when=("use_num_upates", True)),),
        ),
        buffers="no",
        update_methods=("forward", "__call__"),
        apply_methods=("copy_to",),
        store_methods=("store",),
        restore_methods=("restore",),
        library="CompVis latent diffusion",
        copies_source=True,
        docs="https://github.com/CompVis/stable-diffusion",
    ),
    ApiSpec(
        "guided_diffusion.nn.update_ema",
        Role.EMA_FUNCTION,
        params=("target_params", "source_params", "rate"),
        defaults={"target_params": REQUIRED, "source_params": REQUIRED, "rate": 0.99},
        weight=Weight("rate", Side.OLD, 0.99),
        source="source_params",
        shadow="target_params",
        aliases=("improved_diffusion.nn.update_ema",),
        recipe_defaults=False,
        library="guided-diffusion",
        docs="https://github.com/openai/guided-diffusion",
    ),
    ApiSpec(
        "k_diffusion.utils.ema_update",
        Role.EMA_FUNCTION,
        params=("model", "averaged_model", "decay"),
        defaults={"model": REQUIRED, "averaged_model": REQUIRED, "decay": REQUIRED},
        weight=Weight("decay", Side.OLD, None),
        source="model",
        shadow="averaged_model",
        library="k-diffusion",
        docs="https://github.com/crowsonkb/k-diffusion",
        notes="The decay usually comes from EMAWarmup.get_value() (a warmup schedule): "
        "it is judged by the schedule's max_value, the ceiling its ramp approaches.",
    ),
    ApiSpec(
        "k_diffusion.utils.EMAWarmup",
        Role.EMA_SCHEDULE,
        params=("inv_gamma", "power", "min_value", "max_value", "start_at", "last_epoch"),
        defaults={
            "inv_gamma": 1.0,
            "power": 1.0,
            "min_value": 0.0,
            "max_value": 1.0,
            "start_at": 0,
            "last_epoch": 0,
        },
        weight=Weight(
            "max_value",
            Side.OLD,
            1.0,
            ramps=(Ramp(RampKind.INV_GAMMA_POWER, gamma=("inv_gamma", 1.0), power=("power", 1.0)),),
        ),
        update_methods=("step",),
        value_methods=("get_value",),
        library="k-diffusion",
        docs="https://github.com/crowsonkb/k-diffusion",
        notes="get_value() is 1 - (1 + t / inv_gamma) ** -power clamped to [min_value, "
        "max_value]: the decay to pass to ema_update. With max_value=1 (its default, as in "
        "k-diffusion's configs with power 2/3 or 3/4) the ramp itself is the horizon and "
        "is not judged.",
    ),
    ApiSpec(
        "lightly.models.utils.update_momentum",
        Role.EMA_FUNCTION,
        params=("model", "model_ema", "m"),
        defaults={"model": REQUIRED, "model_ema": REQUIRED, "m": REQUIRED},
        weight=Weight("m", Side.OLD, None),
        source="model",
        shadow="model_ema",
        default_use="teacher",
        library="lightly",
        docs="https://docs.lightly.ai/self-supervised-learning/lightly.models.html",
        notes="model_ema = m * model_ema + (1 - m) * model: the momentum encoder of BYOL, "
        "MoCo, DINO (a teacher, usually 0.99-0.996 on a cosine schedule to 1).",
    ),
    ApiSpec(
        "training.phema.PowerFunctionEMA",
        Role.EMA_MODEL,
        params=("net", "stds"),
        defaults={"net": REQUIRED, "stds": None},
        update_methods=("update",),
        apply_methods=("get",),
        copy_getter="get",
        getter_pairs=True,
        source="net",
        library="EDM2",
        copies_source=True,
        docs="https://github.com/NVlabs/edm2",
        notes="Post-hoc power-function EMAs: the profile is a relative std (sigma_rel), not a "
        "decay; get() returns (copy, suffix) pairs of the averaged copies, plain deepcopies "
        "of net (in its mode and dtype: no eval(), no cast).",
    ),
    ApiSpec(
        "training.phema.TraditionalEMA",
        Role.EMA_MODEL,
        params=("net", "halflife_Mimg", "rampup_ratio"),
        defaults={"net": REQUIRED, "halflife_Mimg": float("inf"), "rampup_ratio": 0.09},
        weight=Weight(
            "halflife_Mimg",
            Side.OLD,
            float("inf"),
            ramps=(
                Ramp(
                    RampKind.HALF_LIFE_RAMPUP,
                    gamma=("rampup_ratio", 0.09),
                    when=("rampup_ratio", NOT_NONE),
                ),
            ),
            per_samples=1e6,
        ),
        update_methods=("update",),
        apply_methods=("get",),
        copy_getter="get",
        source="net",
        library="EDM2",
        copies_source=True,
        docs="https://github.com/NVlabs/edm2",
        notes="The horizon is a half-life in images (halflife_Mimg), not a decay; get() "
        "returns the averaged copy, a plain deepcopy of net (its mode and dtype).",
    ),
    ApiSpec(
        "ignite.handlers.EMAHandler",
        Role.EMA_CALLBACK,
        params=("model", "momentum", "momentum_warmup", "warmup_iters", "handle_buffers"),
        defaults={
            "model": REQUIRED,
            "momentum": 0.0002,
            "momentum_warmup": None,
            "warmup_iters": None,
            "handle_buffers": "copy",
        },
        weight=Weight("momentum", Side.NEW, 0.0002),
        buffers="copied",
        model_copy="ema_model",
        copies_source=True,
        source="model",
        aliases=("ignite.handlers.ema_handler.EMAHandler",),
        library="PyTorch-Ignite",
        docs="https://pytorch.org/ignite/generated/ignite.handlers.ema_handler.EMAHandler.html",
        notes="momentum is the weight on the new value; attach(engine) updates the copy every "
        "iteration; momentum_warmup ramps the momentum down to momentum over warmup_iters.",
    ),
    ApiSpec(
        "stable_baselines3.common.utils.polyak_update",
        Role.EMA_FUNCTION,
        params=("params", "target_params", "tau"),
        defaults={"params": REQUIRED, "target_params": REQUIRED, "tau": REQUIRED},
        weight=Weight("tau", Side.NEW, None),
        source="params",
        shadow="target_params",
        default_use="target",
        library="Stable-Baselines3",
        docs="https://stable-baselines3.readthedocs.io/",
    ),
)


class ApiTable:
    """Lookup of specs by any of their qualified names, or by config registry name."""

    def __init__(self, specs: Iterable[ApiSpec]) -> None:
        self.specs = tuple(specs)
        self.by_name: dict[str, ApiSpec] = {}
        self.by_registry: dict[str, ApiSpec] = {}
        for spec in self.specs:
            for name in (spec.qualname, *spec.aliases):
                if name in self.by_name:
                    raise ValueError(f"two API entries claim {name}")
                self.by_name[name] = spec
            for name in spec.registry_names:
                self.by_registry[name] = spec

    def get(self, qualname: str) -> ApiSpec | None:
        return self.by_name.get(qualname)

    def registered(self, name: str) -> ApiSpec | None:
        """The spec a config registry name (``'EMAHook'``, ``'mmdet.ExpMomentumEMA'``) means."""
        spec = self.by_registry.get(name)
        if spec is None and "." in name:
            spec = self.by_registry.get(name.rsplit(".", 1)[-1])
        return spec

    def names(self) -> set[str]:
        return set(self.by_name)

    def short_names(self) -> set[str]:
        """The last component of every name: what a file must contain to use the API."""
        found = {name.rsplit(".", 1)[-1] for name in self.by_name}
        found.update(name.rsplit(".", 1)[-1] for name in self.by_registry)
        return found


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
            keyword = arg.keyword.value
            bound.args[keyword] = arg
            if not spec.accepts(keyword):
                bound.unknown_keywords.append(keyword)
            continue
        if position < len(spec.params):
            bound.args[spec.params[position]] = arg
        position += 1
    return bound


def semantics_table(roles: Iterable[Role] | None = None) -> str:
    """A Markdown table of what the averaging weight means in each library (for rule docs)."""
    wanted = set(roles) if roles is not None else None
    rows = [
        "| API | weight argument | meaning | default | warmup (value is a ceiling) "
        "| update interval |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for spec in API_SPECS:
        if spec.weight is None or (wanted is not None and spec.role not in wanted):
            continue
        if spec.role is Role.OPTIMIZER and spec.library == "Keras" and spec.short_name != "Adam":
            continue
        weight = spec.weight
        name = spec.qualname
        if spec.library == "Keras":
            name = "keras.optimizers.* (Adam, SGD, ...)"
        position = spec.position_of(weight.param)
        where = f"`{weight.param}`" + (
            f" (argument {position + 1})" if position is not None else " (keyword)"
        )
        if weight.per_samples is not None:
            meaning = (
                f"half-life in units of {weight.per_samples:g} samples: D = 0.5^(batch / "
                f"(value x {weight.per_samples:g})) per update, batch from the update's "
                f"`{weight.batch_arg[0]}`"
            )
        elif weight.side is Side.OLD:
            meaning = "decay D: weight on the old average"
        else:
            meaning = "momentum M = 1 - D: weight on the new value"
        if spec.role is Role.GRADIENT_EMA:
            meaning += "; averages gradients, not weights (never judged)"
        if weight.enabled_when is not None:
            meaning += f"; only with {weight.enabled_when[0]}={weight.enabled_when[1]}"
        default = "required" if weight.default is None else f"{weight.default:g}"
        interval = (
            f"`{spec.interval.param}` (default {spec.interval.default})" if spec.interval else ""
        )
        rows.append(
            f"| `{name}` | {where} | {meaning} | {default} | {weight.ramp or 'none'} | {interval} |"
        )
    return "\n".join(rows)
