"""Training scripts with a hand-made EMA shadow, written from parts by a hypothesis strategy.

The companion of ``scripts.py`` (which writes scripts around an averaging library) for the
EMA3xx rules: the average is a ``copy.deepcopy`` of the model kept current by the project's
own code. A :class:`HandPlan` says what the script holds, injectors
(``handmade_injectors.py``) edit it, and :func:`render` writes it, recording the line of
every tagged piece of code so that each injected bug knows where its finding goes.

The parts, as they appear in real code (timm's ``ModelEmaV2`` before it was a library,
guided-diffusion's ``update_ema``, DINO's teacher update, minGPT/nanoGPT-style loops):

- imports: torch under its name or an alias, ``copy.deepcopy`` through its module or by
  name;
- the shadow: ``deepcopy(model)`` frozen with ``requires_grad_(False)`` (chained with
  ``eval()`` or not) or a loop over its parameters, held by a name, or by a ``ModelEMA``-like
  class of the script's own (``self.module``);
- where the update lives (:data:`STRUCTURES`): inline in the loop, in a helper function
  (``update_ema(ema, model, decay)``), or in the class's ``update`` method;
- the update's arithmetic (:data:`FORMS`): ``mul_(d).add_(p, alpha=1 - d)``, ``lerp_``,
  ``copy_`` of a combination, ``.data =``, over ``zip(parameters())``, a
  ``named_parameters()`` dict, ``state_dict().items()`` (buffers included), or
  ``torch._foreach_*`` over lists;
- the grad mode (:data:`GRAD_MODES`): ``with torch.no_grad()`` / ``inference_mode()``
  around the update or the call, ``@torch.no_grad()`` on the helper, or a detached source
  on a frozen copy;
- the buffers: copied after the parameters, recalibrated with ``update_bn``, held by the
  ``state_dict()`` form, or irrelevant (a LayerNorm model);
- the decay: a module constant, an argparse default, a function default, or a literal;
- legitimate look-alikes: BatchNorm momentum, AdamW betas, a DINO-style teacher with a
  cosine momentum schedule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from tests.generated.scripts import _IDENTIFIERS, Bug, _Writer, write_main

# The update's arithmetic, with ``{e}`` the averaged tensor, ``{p}`` the live one (as read,
# ``.detach()`` or not) and ``{d}`` the decay. Forms over parameters only (``zip``, ``named``,
# ``foreach``) leave the buffers to other code; ``state_dict`` averages them too.
FORMS = (
    "mul_add",
    "two_step",
    "lerp",
    "copy",
    "data",
    "named",
    "named_zip",
    "state_dict",
    "foreach",
    "foreach_lerp",
)
PARAMETER_FORMS = frozenset(FORMS) - {"state_dict"}
# Loops over ``zip(ema.<m>(), model.<m>())`` of parameters() or named_parameters().
ZIP_FORMS = frozenset({"mul_add", "two_step", "lerp", "copy", "data", "named_zip"})
STRUCTURES = ("inline", "function", "class")
# Forms whose loop can filter the entries it averages: by kind (``if p.ndim > 1:``, the zip
# forms of one statement) or by name (the forms that bind a name).
FILTER_KIND_FORMS = frozenset({"mul_add", "lerp", "copy", "data", "named_zip"})
FILTER_NAME_FORMS = frozenset({"named_zip", "named"})
# The filter of the update: "none"; clean: "kind-else-copy" (the rest copied in an ``else``),
# "requires-grad" (trainable entries only); bugs: "kind" (``if p.ndim > 1:``), "name" (``if
# "weight" in name:``), "name-continue" (``if "bias" in name: continue``).
FILTERS = ("none", "kind-else-copy", "requires-grad", "kind", "name", "name-continue")
# "no_grad"/"inference"/"set_grad": a ``with`` block around the update (inline) or around
# the call (helper, method); "decorator"/"inference_decorator": ``@torch.no_grad()`` /
# ``@torch.inference_mode()`` on the helper or method; "detached":
# no guard, but the live weights are read with ``.detach()`` and the copy is frozen; "none":
# the update runs with gradients enabled (EMA303's bug).
GRAD_MODES = (
    "no_grad",
    "inference",
    "set_grad",
    "decorator",
    "inference_decorator",
    "detached",
    "none",
)
_DECORATORS = ("decorator", "inference_decorator")

NAME_POOLS = {
    "model": ("model", "net", "network", "backbone", "student"),
    "ema": ("ema", "model_ema", "ema_model", "ema_net", "shadow", "avg_model", "averaged"),
    "optimizer": ("optimizer", "opt", "optim"),
    "loader": ("loader", "train_loader", "dataloader"),
    "val_loader": ("val_loader", "eval_loader", "valid_dl"),
    "train": ("train", "fit", "run_training"),
    "evaluate": ("evaluate", "validate", "run_eval"),
    "update": ("update_ema", "ema_update", "update_average", "accumulate_ema", "ema_step"),
    "class": ("ModelEMA", "EMAHelper", "EmaModel", "ModelEma", "ShadowModel"),
    "decay": ("decay", "ema_decay", "beta"),
    "constant": ("EMA_DECAY", "DECAY", "MODEL_EMA_DECAY"),
    "flag": ("--ema-decay", "--model-ema-decay"),
    "e": ("e", "ema_p", "p_ema", "shadow_p", "ema_param", "s"),
    "p": ("p", "param", "p_model", "online_p", "w"),
    "name": ("name", "key", "k", "n"),
    "msd": ("model_params", "params", "msd", "live"),
    "torch": ("torch", "torch", "th"),
    "step": ("step", "i", "it"),
    "epoch": ("epoch", "ep"),
}
# Names that may also be any identifier: they carry no role in the averaging.
_NEUTRAL = ("loader", "val_loader", "train", "evaluate", "step", "epoch")


@dataclass
class HandPlan:
    """Everything a script will contain; injectors edit it before it is rendered."""

    names: dict[str, str]
    copy_style: str  # "module" (copy.deepcopy) or "from" (from copy import deepcopy)
    structure: str  # STRUCTURES
    form: str  # FORMS
    grad: str  # GRAD_MODES
    freeze: str  # "chain" (.requires_grad_(False)), "eval-chain", "loop", "none"
    placement: str  # "constant", "argparse", "default", "literal"
    decay: str  # as written, e.g. "0.9998"
    batchnorm: bool  # the model has BatchNorm (its buffers matter)
    buffers: str  # "copy", "update_bn", "none"
    loop: str  # "plain", "accumulate"
    dino: bool  # a DINO-style teacher with a cosine momentum schedule
    adam_betas: bool
    validation: str  # "inline" or "function"
    filter: str = "none"  # FILTERS
    # What the injectors change: the statement that updates one tensor (``None``: the form's
    # correct one) and the bugs they injected.
    update: str | None = None
    first: str | None = None  # the ``mul_`` statement of the two-statement forms
    bugs: list[Bug] = field(default_factory=list)

    def has(self, code: str) -> bool:
        return any(bug.code == code for bug in self.bugs)


def _names(draw) -> dict[str, str]:
    names: dict[str, str] = {}
    for key, pool in NAME_POOLS.items():
        taken = frozenset(names.values()) - {"torch"}
        if key in _NEUTRAL and draw(st.integers(0, 3)) == 0:
            choice = draw(_IDENTIFIERS.filter(lambda name, taken=taken: name not in taken))
        else:
            choice = draw(st.sampled_from([n for n in pool if n not in taken] or list(pool)))
        names[key] = choice
    return names


@st.composite
def hand_plans(draw, forms: frozenset[str] = frozenset(FORMS)) -> HandPlan:
    """A clean plan, in one of ``forms``: a correct update in its grad mode, with its buffers
    handled."""
    structure = draw(st.sampled_from(STRUCTURES))
    placements = ["constant", "argparse", "literal"]
    if structure != "inline":
        placements.append("default")
    batchnorm = draw(st.booleans())
    form = draw(st.sampled_from([f for f in FORMS if f in forms]))
    plan = HandPlan(
        names=_names(draw),
        copy_style=draw(st.sampled_from(["module", "from"])),
        structure=structure,
        form=form,
        grad=draw(st.sampled_from([g for g in GRAD_MODES if g != "none"])),
        freeze=draw(st.sampled_from(["chain", "eval-chain", "loop"])),
        placement=draw(st.sampled_from(placements)),
        decay=draw(st.sampled_from(["0.999", "0.9995", "0.9998", "0.9999"])),
        batchnorm=batchnorm,
        buffers="none",
        loop=draw(st.sampled_from(["plain", "accumulate"])),
        dino=draw(st.booleans()),
        adam_betas=draw(st.booleans()),
        validation=draw(st.sampled_from(["inline", "function"])),
    )
    if plan.grad == "inference" and structure != "inline" and draw(st.booleans()):
        plan.grad = "no_grad"
    if plan.grad in _DECORATORS and structure == "inline":
        plan.grad = "no_grad"
    if plan.grad == "detached" and not _detachable(plan):
        plan.grad = "no_grad"
    if form in FILTER_KIND_FORMS:
        plan.filter = draw(st.sampled_from(["none", "kind-else-copy", "requires-grad"]))
    if batchnorm and form in PARAMETER_FORMS:
        plan.buffers = draw(st.sampled_from(["copy", "update_bn"]))
    elif form in PARAMETER_FORMS:
        plan.buffers = draw(st.sampled_from(["copy", "none"]))
    return plan


def _detachable(plan: HandPlan) -> bool:
    """Forms whose source can be read detached: one tensor at a time, in place."""
    return plan.form in ("mul_add", "two_step", "lerp", "copy", "named", "named_zip")


# Rendering -------------------------------------------------------------------------------------
@dataclass
class HandScript:
    source: str
    plan: HandPlan
    lines: dict[str, int]

    def expected(self) -> list[tuple[str, int]]:
        return sorted((bug.code, self._line(bug)) for bug in self.plan.bugs)

    def _line(self, bug) -> int:
        # A bad value is reported where its literal is written (the constant, the argparse
        # default), the update using it being the related location.
        if bug.code in _VALUE_CODES and "value-definition" in self.lines:
            return self.lines["value-definition"]
        return self.lines[bug.tag]


_VALUE_CODES = frozenset({"EMA101", "EMA102", "EMA103", "EMA104"})


def render(plan: HandPlan) -> HandScript:
    w = _Writer()
    _header(w, plan)
    _settings(w, plan)
    _build_model(w, plan)
    if plan.structure == "function":
        w()
        w()
        _update_function(w, plan)
    elif plan.structure == "class":
        w()
        w()
        _ema_class(w, plan)
    if plan.dino:
        w()
        w()
        _dino_update(w, plan)
    if plan.validation == "function":
        w()
        w()
        _evaluate_function(w, plan)
    w()
    w()
    _train(w, plan)
    _main(w, plan)
    return HandScript("\n".join(w.lines) + "\n", plan, w.tags)


def _header(w: _Writer, plan: HandPlan) -> None:
    n = plan.names
    w('"""Train a classifier and keep an exponential moving average of its weights."""')
    w()
    if plan.placement == "argparse":
        w("import argparse")
    w("import copy" if plan.copy_style == "module" else "from copy import deepcopy")
    if plan.dino:
        w("import math")
    w()
    w("import torch" if n["torch"] == "torch" else f"import torch as {n['torch']}")
    w("from torch import nn")
    if plan.buffers == "update_bn":
        w("from torch.optim.swa_utils import update_bn")
    w()
    w("LR = 3e-4")
    w("EPOCHS = 100")
    if plan.loop == "accumulate":
        w("ACCUM = 4")


def _settings(w: _Writer, plan: HandPlan) -> None:
    n = plan.names
    if plan.placement == "constant":
        w(f"{n['constant']} = {plan.decay}", tag="value-definition")
    if plan.dino:
        w("TEACHER_MOMENTUM = 0.996")
    if plan.placement == "argparse":
        w()
        w()
        w("def parse_args():")
        with w.block():
            w('parser = argparse.ArgumentParser(description="train")')
            w('parser.add_argument("--lr", type=float, default=3e-4)')
            w(
                f'parser.add_argument("{n["flag"]}", type=float, default={plan.decay})',
                tag="value-definition",
            )
            w("return parser.parse_args()")


def _deepcopy(plan: HandPlan, what: str) -> str:
    return f"copy.deepcopy({what})" if plan.copy_style == "module" else f"deepcopy({what})"


def _build_model(w: _Writer, plan: HandPlan) -> None:
    w()
    w()
    w("def build_model(in_features=32, hidden=128, classes=10):")
    with w.block():
        norm = "nn.BatchNorm1d(hidden, momentum=0.01)" if plan.batchnorm else "nn.LayerNorm(hidden)"
        w("return nn.Sequential(")
        with w.block():
            w("nn.Linear(in_features, hidden),")
            w(f"{norm},")
            w("nn.ReLU(),")
            w("nn.Linear(hidden, classes),")
        w(")")


def _decay_value(plan: HandPlan) -> str:
    """How the training code spells the decay where it calls or runs the update."""
    if plan.placement == "constant":
        return plan.names["constant"]
    if plan.placement == "argparse":
        return "args." + plan.names["flag"].lstrip("-").replace("-", "_")
    return plan.decay


def _decay_name(plan: HandPlan) -> str:
    """How the update itself spells the decay: the helper's parameter, or the value."""
    return _decay_value(plan) if plan.structure == "inline" else plan.names["decay"]


def _freeze(w: _Writer, plan: HandPlan, target: str, model: str) -> None:
    """The copy, frozen (or not, for EMA303's "raises" shape)."""
    copied = _deepcopy(plan, model)
    if plan.freeze == "none":
        w(f"{target} = {copied}", tag="copy")
    elif plan.freeze == "chain":
        w(f"{target} = {copied}.requires_grad_(False)", tag="copy")
    elif plan.freeze == "eval-chain":
        w(f"{target} = {copied}.eval().requires_grad_(False)", tag="copy")
    else:
        w(f"{target} = {copied}", tag="copy")
        w(f"{target}.eval()")
        w(f"for param in {target}.parameters():")
        with w.block():
            w("param.requires_grad_(False)")


def _source(plan: HandPlan, p: str) -> str:
    return f"{p}.detach()" if plan.grad == "detached" else p


def update_statement(plan: HandPlan, e: str, p: str, d: str) -> str:
    """The correct statement that averages one tensor, for the zip forms."""
    src = _source(plan, p)
    return {
        "mul_add": f"{e}.mul_({d}).add_({src}, alpha=1 - {d})",
        "two_step": f"{e}.add_({src}, alpha=1 - {d})",
        "named_zip": f"{e}.lerp_({src}, 1 - {d})",
        "lerp": f"{e}.lerp_({src}, 1 - {d})",
        "copy": f"{e}.copy_({d} * {e} + (1 - {d}) * {src})",
        "data": f"{e}.data = {d} * {e}.data + (1 - {d}) * {p}.data",
        "named": f"{e}.mul_({d}).add_({src}, alpha=1 - {d})",
    }[plan.form]


def _update_body(w: _Writer, plan: HandPlan, ema: str, model: str, d: str) -> None:
    """The update of every averaged tensor (and of the buffers, where the plan copies them)."""
    n, torch = plan.names, plan.names["torch"]
    e, p = n["e"], n["p"]
    update = plan.update
    if plan.form == "named_zip":
        w(
            f"for ({n['name']}, {e}), (_, {p}) in "
            f"zip({ema}.named_parameters(), {model}.named_parameters()):",
            tag="loop",
        )
        with w.block():
            _filtered(w, plan, update or update_statement(plan, e, p, d), p)
    elif plan.form in ZIP_FORMS:
        w(f"for {e}, {p} in zip({ema}.parameters(), {model}.parameters()):", tag="loop")
        with w.block():
            if plan.form == "two_step":
                w(plan.first or f"{e}.mul_({d})")
            _filtered(w, plan, update or update_statement(plan, e, p, d), p)
    elif plan.form == "named":
        msd, name = n["msd"], n["name"]
        w(f"{msd} = dict({model}.named_parameters())")
        w(f"for {name}, {e} in {ema}.named_parameters():", tag="loop")
        with w.block():
            source = f"{msd}[{name}]"
            _filtered(w, plan, update or update_statement(plan, e, source, d), source)
    elif plan.form == "state_dict":
        msd, name = n["msd"], n["name"]
        w(f"{msd} = {model}.state_dict()")
        w(f"for {name}, {e} in {ema}.state_dict().items():", tag="loop")
        with w.block():
            w(f"if {e}.dtype.is_floating_point:")
            with w.block():
                w(
                    update or f"{e}.mul_({d}).add_({msd}[{name}].detach(), alpha=1 - {d})",
                    tag="update",
                )
            w("else:")
            with w.block():
                w(f"{e}.copy_({msd}[{name}])")
    else:
        w(f"ema_params = list({ema}.parameters())")
        w(f"live_params = list({model}.parameters())")
        if plan.form == "foreach":
            w(plan.first or f"{torch}._foreach_mul_(ema_params, {d})")
            w(
                update or f"{torch}._foreach_add_(ema_params, live_params, alpha=1 - {d})",
                tag="update",
            )
        else:
            w(update or f"{torch}._foreach_lerp_(ema_params, live_params, 1 - {d})", tag="update")
    if plan.buffers == "copy":
        w(f"for ema_buffer, buffer in zip({ema}.buffers(), {model}.buffers()):")
        with w.block():
            w("ema_buffer.copy_(buffer)")


def _filtered(w: _Writer, plan: HandPlan, statement: str, p: str) -> None:
    """The update of one tensor, under the plan's filter of the entries."""
    e, name = plan.names["e"], plan.names["name"]
    if plan.filter == "none":
        w(statement, tag="update")
        return
    if plan.filter == "name-continue":
        w(f'if "bias" in {name}:', tag="filter")
        with w.block():
            w("continue")
        w(statement, tag="update")
        return
    test = {
        "kind": f"{p}.ndim > 1",
        "kind-else-copy": f"{p}.ndim > 1",
        "requires-grad": f"{p}.requires_grad",
        "name": f'"weight" in {name}',
    }[plan.filter]
    w(f"if {test}:", tag="filter")
    with w.block():
        w(statement, tag="update")
    if plan.filter == "kind-else-copy":
        w("else:")
        with w.block():
            w(f"{e}.copy_({_source(plan, p)})")


def _grad_decorator(w: _Writer, plan: HandPlan) -> None:
    if plan.grad == "decorator":
        w(f"@{plan.names['torch']}.no_grad()")
    elif plan.grad == "inference_decorator":
        w(f"@{plan.names['torch']}.inference_mode()")


def _update_function(w: _Writer, plan: HandPlan) -> None:
    n = plan.names
    d = n["decay"]
    params = ["ema", "model", f"{d}={plan.decay}" if plan.placement == "default" else d]
    _grad_decorator(w, plan)
    w(f"def {n['update']}({', '.join(params)}):")
    with w.block():
        w('"""Move the averaged weights toward the live ones."""')
        _update_body(w, plan, "ema", "model", d)


def _ema_class(w: _Writer, plan: HandPlan) -> None:
    n = plan.names
    d = n["decay"]
    default = f"={plan.decay}" if plan.placement == "default" else ""
    w(f"class {n['class']}:")
    with w.block():
        w('"""An exponential moving average of a model\'s weights, for evaluation."""')
        w()
        w(f"def __init__(self, model, {d}{default}):")
        with w.block():
            _freeze(w, plan, "self.module", "model")
            w(f"self.{d} = {d}")
        w()
        _grad_decorator(w, plan)
        w("def update(self, model):")
        with w.block():
            w(f"{d} = self.{d}")
            _update_body(w, plan, "self.module", "model", d)


def _dino_update(w: _Writer, plan: HandPlan) -> None:
    """DINO's teacher: a cosine schedule of its momentum, updated in place under no_grad."""
    torch = plan.names["torch"]
    w("def momentum_schedule(it, total, base=TEACHER_MOMENTUM):")
    with w.block():
        w("return 1 - (1 - base) * (math.cos(math.pi * it / total) + 1) / 2")
    w()
    w()
    w(f"@{torch}.no_grad()")
    w("def update_teacher(student, teacher, m):")
    with w.block():
        w("for p_s, p_t in zip(student.parameters(), teacher.parameters()):")
        with w.block():
            w("p_t.data.mul_(m).add_((1 - m) * p_s.detach().data)")


def _evaluate_function(w: _Writer, plan: HandPlan) -> None:
    torch = plan.names["torch"]
    w(f"def {plan.names['evaluate']}(model, loader):")
    with w.block():
        w("model.eval()")
        w("correct = total = 0")
        w(f"with {torch}.no_grad():")
        with w.block():
            w("for x, y in loader:")
            with w.block():
                w("correct += (model(x).argmax(dim=1) == y).sum().item()")
                w("total += y.numel()")
        w("return correct / max(total, 1)")


def _averaged(plan: HandPlan) -> str:
    ema = plan.names["ema"]
    return f"{ema}.module" if plan.structure == "class" else ema


def _guarded(w: _Writer, plan: HandPlan):
    """A ``with`` block for the grad modes that put one around the update or its call."""
    torch = plan.names["torch"]
    if plan.grad == "no_grad":
        w(f"with {torch}.no_grad():")
        return w.block()
    if plan.grad == "inference":
        w(f"with {torch}.inference_mode():")
        return w.block()
    if plan.grad == "set_grad":
        w(f"with {torch}.set_grad_enabled(False):")
        return w.block()
    return _Nothing()


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _after_step(w: _Writer, plan: HandPlan) -> None:
    n = plan.names
    model, ema = n["model"], n["ema"]
    d = _decay_value(plan)
    if plan.structure == "inline":
        with _guarded(w, plan):
            _update_body(w, plan, ema, model, d)
    elif plan.structure == "function":
        call = (
            f"{n['update']}({ema}, {model})"
            if plan.placement == "default"
            else (f"{n['update']}({ema}, {model}, {d})")
        )
        with _guarded(w, plan):
            # The literal written in the call is where a bad value is reported.
            w(call, tag="value-definition" if plan.placement == "literal" else None)
    else:
        with _guarded(w, plan):
            w(f"{ema}.update({model})")
    if plan.dino:
        w(f"update_teacher({model}, teacher, momentum_schedule(global_step, total_steps))")


def _train(w: _Writer, plan: HandPlan) -> None:
    n = plan.names
    torch, model, ema, opt = n["torch"], n["model"], n["ema"], n["optimizer"]
    loader, step, epoch = n["loader"], n["step"], n["epoch"]
    params = [model, loader, n["val_loader"]]
    if plan.placement == "argparse":
        params.append("args")
    w(f"def {n['train']}({', '.join(params)}):")
    with w.block():
        betas = ", betas=(0.9, 0.999)" if plan.adam_betas else ""
        w(f"{opt} = {torch}.optim.AdamW({model}.parameters(), lr=LR{betas})")
        w("criterion = nn.CrossEntropyLoss()")
        if plan.structure == "class":
            d = _decay_value(plan)
            arg = "" if plan.placement == "default" else f", {n['decay']}={d}"
            literal = plan.placement == "literal"
            w(f"{ema} = {n['class']}({model}{arg})", tag="value-definition" if literal else None)
        else:
            _freeze(w, plan, ema, model)
        if plan.dino:
            w(f"teacher = {_deepcopy(plan, model)}")
            w("teacher.requires_grad_(False)")
            w(f"total_steps = EPOCHS * len({loader})")
            w("global_step = 0")
        w(f"for {epoch} in range(EPOCHS):")
        with w.block():
            w(f"{model}.train()")
            w(f"for {step}, (x, y) in enumerate({loader}):")
            with w.block():
                w(f"loss = criterion({model}(x), y)")
                if plan.dino:
                    w(f"with {torch}.no_grad():")
                    with w.block():
                        w("target = teacher(x).softmax(dim=1)")
                    w(f"loss = loss + 0.1 * (({model}(x).softmax(dim=1) - target) ** 2).mean()")
                if plan.loop == "plain":
                    w(f"{opt}.zero_grad()")
                    w("loss.backward()")
                    w(f"{opt}.step()")
                    _after_step(w, plan)
                else:
                    w("(loss / ACCUM).backward()")
                    w(f"if ({step} + 1) % ACCUM == 0:")
                    with w.block():
                        w(f"{opt}.step()")
                        w(f"{opt}.zero_grad()")
                        _after_step(w, plan)
                if plan.dino:
                    w("global_step += 1")
            _validate(w, plan)
        if plan.buffers == "update_bn":
            w(f"update_bn({loader}, {_averaged(plan)})")
        w(f"return {ema}")


def _validate(w: _Writer, plan: HandPlan) -> None:
    n, torch = plan.names, plan.names["torch"]
    averaged, val = _averaged(plan), n["val_loader"]
    if plan.validation == "function":
        w(f"accuracy = {n['evaluate']}({averaged}, {val})")
    else:
        w(f"{averaged}.eval()")
        w("correct = total = 0")
        w(f"with {torch}.no_grad():")
        with w.block():
            w(f"for x, y in {val}:")
            with w.block():
                w(f"correct += ({averaged}(x).argmax(dim=1) == y).sum().item()")
                w("total += y.numel()")
        w("accuracy = correct / max(total, 1)")
    w('print(f"epoch {' + n["epoch"] + '}: accuracy {accuracy:.3f}")')


def _main(w: _Writer, plan: HandPlan) -> None:
    setup = [("args = parse_args()", "args")] if plan.placement == "argparse" else []
    write_main(w, plan.names, setup, trainer_class=False)
