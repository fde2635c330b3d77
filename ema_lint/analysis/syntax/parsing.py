"""Parsing a module with libcst, at the cost of the parse alone.

Two costs of ``libcst.parse_module`` are not the parser's: each node the native parser
builds runs its ``_validate`` (libcst's own note calls that redundant for a parsed file:
the parser only builds valid trees), about a sixth of the parse; and the cyclic garbage
collector, set off every few hundred allocations, walks the growing heap while a large
module's hundred thousand nodes are made, which on a long run costs more than the parse.
A syntax tree holds no reference cycle (children never point at parents), so nothing the
collector could free is made while it is paused.
"""

from __future__ import annotations

import gc
import threading

import libcst as cst
from libcst._nodes.base import CSTNode

_LOCK = threading.Lock()
_VALIDATING = CSTNode.__post_init__


def _skip_validation(self: CSTNode) -> None:
    """A parsed node is valid by construction."""


def _only_validates(method: object) -> bool:
    """``CSTNode.__post_init__`` does nothing but ``self._validate()`` (as in every libcst
    release so far): only then is skipping it no change but speed."""
    code = getattr(method, "__code__", None)
    return code is not None and code.co_names == ("_validate",)


_CAN_SKIP = _only_validates(_VALIDATING)


def parse_module(source: bytes | str) -> cst.Module:
    """``libcst.parse_module(source)``, without re-validating the nodes the parser makes and
    without the cyclic collector running during the parse."""
    with _LOCK:
        collecting = gc.isenabled()
        gc.disable()
        if _CAN_SKIP:
            CSTNode.__post_init__ = _skip_validation  # type: ignore[method-assign]
        try:
            return cst.parse_module(source)
        finally:
            if _CAN_SKIP:
                CSTNode.__post_init__ = _VALIDATING  # type: ignore[method-assign]
            if collecting:
                gc.enable()
