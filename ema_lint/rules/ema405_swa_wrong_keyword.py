"""EMA405: a keyword the SWA API does not have (SWALR's docstring names, Lightning's)."""

from __future__ import annotations

import difflib

import libcst as cst

from ..analysis.objects.api_calls import BoundCalls
from ..analysis.objects.apis import ApiSpec, BoundCall
from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..rule import Rule

# Names people write for the parameters of the SWA APIs, from their docstrings and from
# each other (torch's SWALR vs Lightning's StochasticWeightAveraging), by the real name.
_CONFUSED: dict[str, tuple[str, ...]] = {
    "swa_lr": ("swa_lrs", "lr", "swa_learning_rate"),
    "swa_lrs": ("swa_lr", "lr", "swa_learning_rate"),
    "anneal_epochs": ("annealing_epochs", "anneal_epoch", "annealing_epoch"),
    "annealing_epochs": ("anneal_epochs", "anneal_epoch", "annealing_epoch"),
    "anneal_strategy": ("annealing_strategy",),
    "annealing_strategy": ("anneal_strategy",),
    "swa_epoch_start": ("swa_start", "swa_start_epoch", "start_epoch", "swa_epoch"),
    "use_buffers": ("use_buffer", "update_buffers"),
    "update_buffers": ("update_buffer", "use_buffers"),
    "avg_fn": ("avg_func", "avg_function", "average_fn"),
    "multi_avg_fn": ("multi_avg_func",),
    "loader": ("dataloader", "data_loader", "train_loader"),
}
_SWA_NAMES = {"StochasticWeightAveraging", "WeightAveraging", "StochasticWeightAverage"}
_TORCH_NAMES = ("swa_lr", "anneal_epochs", "anneal_strategy")
_LIGHTNING_NAMES = ("swa_lrs", "annealing_epochs", "annealing_strategy")


def _swa_api(spec: ApiSpec) -> bool:
    if spec.qualname.startswith("torch.optim.swa_utils."):
        return True
    return spec.short_name in _SWA_NAMES


class SwaWrongKeyword(Rule):
    """
    ## What it finds
    A keyword argument that the SWA API it is passed to does not have:
    ``SWALR(optimizer, swa_lrs=..., annealing_epochs=..., annealing_strategy=...)`` (names
    its docstring has shown; the parameters are ``swa_lr``, ``anneal_epochs``,
    ``anneal_strategy``), Lightning ``StochasticWeightAveraging(swa_lr=...,
    anneal_epochs=..., swa_start=...)`` (its parameters are ``swa_lrs``,
    ``annealing_epochs``, ``swa_epoch_start``), ``AveragedModel(model, use_buffer=True)``,
    ``update_bn(dataloader=..., model=...)``, and an mmengine ``StochasticWeightAverage``
    configured with ``update_buffer=True``, also in config dicts
    (``dict(type='EMAHook', ema_type='StochasticWeightAverage', ...)``). The API is
    resolved through imports and aliases (``import torch.optim.swa_utils as su``).

    ## Why it hurts training
    Code copied between torch and Lightning, or from the docstring, fails at start-up with
    a ``TypeError``, after the data is loaded and the job is queued; a config dict fails
    when the runner builds it. Where a wrapper swallows unknown keywords, the run goes on
    with the defaults: an SWA learning rate or an annealing period nobody chose.

    ## Example
    ```python
    from torch.optim.swa_utils import SWALR

    swa_scheduler = SWALR(optimizer, swa_lrs=0.05, annealing_epochs=5)
    ```

    ## Use instead
    ```python
    from torch.optim.swa_utils import SWALR

    swa_scheduler = SWALR(optimizer, swa_lr=0.05, anneal_epochs=5)
    ```

    ## Fix
    Safe: the keyword is renamed to the API's parameter it stands for (known confusions
    first, else the one closest in spelling). No fix when that parameter is already given
    (by keyword or position) or may be (``*args``, ``**kwargs``), when two keywords would
    become the same one, or when no parameter is close.
    """

    code = "EMA405"
    name = "swa-wrong-keyword"
    summary = "Keyword the SWA API does not have (swa_lrs, annealing_epochs, ...)"
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = (
        b"SWALR",
        b"AveragedModel",
        b"update_bn",
        b"avg_fn",
        b"StochasticWeightAverag",
        b"WeightAveraging",
    )
    requires = (BoundCalls,)

    def finish(self) -> None:
        for bound in self.ctx.get(BoundCalls).calls:
            spec = bound.averaging
            if bound.unknown_keywords and _swa_api(spec):
                self._judge(bound, spec)

    def _judge(self, bound: BoundCall, spec: ApiSpec) -> None:
        wanted = {k: self._meant(k, spec) for k in bound.unknown_keywords}
        for keyword, meant in wanted.items():
            arg = bound.args.get(keyword)
            if arg is None:
                continue
            node = arg.keyword if isinstance(arg, cst.Arg) and arg.keyword else arg
            if isinstance(arg, cst.DictElement):
                node = arg.key
            fix = None
            clash = ""
            if meant is not None:
                if meant in bound.args:
                    clash = "which is already given"
                elif bound.has_star:
                    clash = "which may also arrive through *args or **kwargs"
                elif sum(1 for m in wanted.values() if m == meant) > 1:
                    clash = "like another keyword of this call"
                else:
                    fix = self._rename(arg, meant)
            self.report(node, self._message(spec, keyword, meant, clash), fix)

    @staticmethod
    def _meant(keyword: str, spec: ApiSpec) -> str | None:
        params = spec.all_params
        for real, confused in _CONFUSED.items():
            if keyword in confused and real in params:
                return real
        close = difflib.get_close_matches(keyword, params, n=1, cutoff=0.8)
        return close[0] if close else None

    @staticmethod
    def _message(spec: ApiSpec, keyword: str, meant: str | None, clash: str) -> str:
        api = spec.short_name
        text = f"{api} has no parameter {keyword!r}: a TypeError when it is built"
        if api == "SWALR" and keyword in _LIGHTNING_NAMES:
            text += " (SWALR's docstring has shown it; Lightning's callback spells it so)"
        elif api == "StochasticWeightAveraging" and keyword in _TORCH_NAMES:
            text += " (torch's SWALR spells it so)"
        if meant is None:
            return text + f"; its parameters are {', '.join(spec.all_params)}"
        if clash:
            return text + f"; it stands for {meant!r}, {clash}"
        return text + f"; the parameter is {meant!r}"

    @staticmethod
    def _rename(arg: cst.Arg | cst.DictElement, meant: str) -> Fix | None:
        title = f"Use the keyword {meant}"
        if isinstance(arg, cst.Arg) and arg.keyword is not None:
            return Fix.safe(title, Edit.replace(arg.keyword, cst.Name(meant)))
        if isinstance(arg, cst.DictElement) and isinstance(arg.key, cst.SimpleString):
            key = arg.key
            quote = key.quote
            return Fix.safe(
                title, Edit.replace(key, cst.SimpleString(f"{key.prefix}{quote}{meant}{quote}"))
            )
        return None
