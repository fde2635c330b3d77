"""Averaging weights that cross modules.

Real training code configures an average in one file and sets its value in another: an
engine's ``update_ema(ema_params, model_params, rate=args.ema_rate)`` inside
``train_one_epoch(..., args)``, which the main script calls with the namespace its argparse
options fill; a ``create_ema(model, cfg)`` helper reading ``cfg.ema_decay``. The module that
uses the weight cannot tell its value, and the module that writes the value does not see
it used. So:

- the using module leaves a ``ForwardedWeight`` for each weight that is a parameter (or an
  attribute of a parameter) of one of its top-level functions that no call of its own
  passes: the project model records it in the module's summary;
- the calling module matches its calls of such functions (``ForwardedCall``, from the
  project model) and resolves what it passes there, so the value is judged, and fixed,
  where it is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ema_lint.analysis.objects.apis import ApiSpec, Ramp, Weight
from ema_lint.analysis.objects.averaging import Use
from ema_lint.analysis.syntax.index import ModuleIndex
from ema_lint.analysis.syntax.values import STAR, Value, ValueResolver, argument_passed


@dataclass(frozen=True, eq=False)
class ForwardedWeight:
    """A weight of this module whose value only the callers of ``function`` in other
    modules can give: the argument for ``param``, or its ``attribute``. ``use_node`` is
    the call or update that uses it, ``used_by`` names it for messages (``update_ema()``)."""

    function: cst.FunctionDef
    param: str
    attribute: str | None
    spec: ApiSpec
    weight: Weight
    use: Use
    interval: int
    ramp: Ramp | None
    ramp_unknown: bool
    use_node: cst.CSTNode
    used_by: str
    # The weight takes the elements of what is passed (a number, a list of numbers or a
    # comma-separated string: ``for rate in self.ema_rate`` built from ``ema_rate``).
    elements: bool = False
    # The weight is ``self.config.<attribute>`` of a method of the class holding
    # ``function``: the ``get_config()`` of a module whose experiment class derives from it
    # sets it (a jaxline experiment overriding its base experiment's config).
    config: bool = False


@dataclass(frozen=True)
class ForwardedCall:
    """What a call of another module's function does with one of its arguments, as the
    project model tells it: ``params`` are the function's positional parameters, in
    order; ``where`` names the use for messages (``update_ema() in engine.py:82``)."""

    params: tuple[str, ...]
    param: str
    attribute: str | None
    spec: ApiSpec
    weight: Weight
    use: Use
    interval: int
    ramp: Ramp | None
    ramp_unknown: bool
    where: str
    elements: bool = False


def forwarding_parameter(
    resolver: ValueResolver, index: ModuleIndex, expr: cst.BaseExpression | None, depth: int = 0
) -> tuple[cst.FunctionDef, str, str | None, bool] | None:
    """``(function, param, attribute, elements)`` when ``expr`` is a parameter of a top-level
    function (``decay``) or an attribute of one (``args.ema_rate``) that no call of this
    module passes: its value comes from callers elsewhere, if anywhere. ``elements``: the
    weight is an element of a sequence built from the parameter (``for rate, params in
    zip(self.ema_rate, ...)`` with ``self.ema_rate`` parsed from ``__init__``'s
    ``ema_rate``)."""
    attribute = None
    base = expr
    elements = False
    source = resolver.element_source(expr) if expr is not None else None
    kept = resolver.kept_on_self(expr) if expr is not None and source is None else None
    if source is not None:
        base, elements = source, True
    elif isinstance(kept, cst.Name):
        # ``EMA(self.model, self.ema_m)`` in a method, with ``self.ema_m = ema_m`` the one
        # assignment (in ``__init__``): the value the class's constructor is given.
        base = kept
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        attribute, base = expr.attr.value, expr.value
    if not isinstance(base, cst.Name):
        return None
    bindings = resolver.bindings_of(base) or []
    if len(bindings) != 1 or bindings[0].kind != "param":
        return None
    function, param = bindings[0].function, bindings[0].param
    if not isinstance(function, cst.FunctionDef) or param is None:
        return None
    if param is function.params.star_arg or param is function.params.star_kwarg:
        return None  # ``*args``/``**kwargs``: what a caller passes there has no name
    if called_as(index, function) is None:
        return None  # a closure, or a method its callers reach through more than a call
    if index.enclosing(function, cst.ClassDef) is not None and param is function.params.params[0]:
        return None  # ``self``
    callers = resolver.callers(function)
    if callers and attribute is None and not elements and depth < MAX_HAND_ON:
        # A helper of this module (``update_ema(..., rate=rate)`` inside a loop over the
        # rates): what its one caller passes may come from elsewhere in turn.
        passed = [argument for _, argument in resolver.arguments_for(function, param)]
        if len(passed) == 1 and passed[0] is not None and passed[0] is not STAR:
            return forwarding_parameter(resolver, index, passed[0], depth + 1)
        return None
    if attribute is None and param.default is not None:
        return None  # the default is this module's value, judged where it is written
    if callers:
        return None  # this module's own calls say what it gets
    return function, base.value, attribute, elements


MAX_HAND_ON = 3  # helpers of one module handing a weight on to each other

CALL_METHODS = ("forward", "__call__")  # what calling an instance runs (``nn.Module``'s call)


def called_as(index: ModuleIndex, function: cst.FunctionDef) -> str | None:
    """The name other modules call ``function`` by: a top-level function's own name, or
    the class of a ``forward``/``__call__`` method (``model(x1, x2, m)`` runs
    ``MoCo.forward``) or of ``__init__`` (``TrainLoop(...)`` runs it); None for closures
    and other methods."""
    owner = index.enclosing(function, cst.ClassDef, cst.FunctionDef)
    if owner is None:
        return function.name.value
    if (
        isinstance(owner, cst.ClassDef)
        and function.name.value in (*CALL_METHODS, "__init__")
        and index.enclosing(owner, cst.ClassDef, cst.FunctionDef) is None
        and function.params.params
    ):
        return owner.name.value
    return None


def passed_argument(call: cst.Call, forwarded: ForwardedCall) -> cst.BaseExpression | None:
    """The argument ``call`` passes for ``forwarded``'s parameter (None: not passed, or a
    starred argument may hold it)."""
    arg = argument_passed(call, forwarded.params, forwarded.param)
    return arg if isinstance(arg, cst.BaseExpression) and arg is not STAR else None


def passed_value(resolver: ValueResolver, call: cst.Call, forwarded: ForwardedCall) -> Value | None:
    """The value ``call`` hands to ``forwarded``'s weight: the argument itself, or its
    attribute (a field of a dataclass made here, the default of an argparse option here)."""
    arg = passed_argument(call, forwarded)
    if arg is None:
        return None
    if forwarded.attribute is None:
        if forwarded.elements:
            return resolver.elements_of(arg)
        return resolver.resolve(arg) or resolver.scheduled_from(arg)
    return resolver.member(arg, forwarded.attribute)
