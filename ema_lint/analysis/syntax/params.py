"""The parameters of a function definition, in the order a call binds them.

One place for the list every layer asks for (a helper's rate, an ``__init__``'s decay, a
parameter passed on), so positional-only and keyword-only parameters are never forgotten
by one copy of the walk and kept by another."""

from __future__ import annotations

import libcst as cst


def all_params(function: cst.FunctionDef | cst.Lambda | cst.Parameters) -> list[cst.Param]:
    """Positional-only, ordinary and keyword-only parameters (not ``*args``/``**kwargs``)."""
    p = function if isinstance(function, cst.Parameters) else function.params
    return [*p.posonly_params, *p.params, *p.kwonly_params]


def positional_names(function: cst.FunctionDef | cst.Lambda) -> list[str]:
    """The names a call's positional arguments bind, in order (``self`` included)."""
    p = function.params
    return [param.name.value for param in (*p.posonly_params, *p.params)]
