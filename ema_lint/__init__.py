"""ema-lint: find and fix misconfigured weight averaging (EMA, SWA) in training code.

The Python API, for editors and other tools::

    import ema_lint

    for d in ema_lint.check(source, path="train.py"):
        print(d.line, d.column, d.code, d.message)

    result = ema_lint.fix(source)
    new_source = result.source
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._version import __version__
from .diagnostics import Applicability, Diagnostic, Fix, Position

__all__ = [
    "Applicability",
    "Diagnostic",
    "Fix",
    "FixResult",
    "Position",
    "__version__",
    "check",
    "fix",
]


@dataclass(frozen=True)
class FixResult:
    """What :func:`fix` did: the new source, how many fixes applied, what is left."""

    source: str | bytes
    applied: int
    diagnostics: list[Diagnostic]

    @property
    def changed(self) -> bool:
        return self.applied > 0


def _settings(
    path: str | None,
    select: Sequence[str] | None,
    ignore: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None,
    unsafe: bool,
    config: str | Path | None,
):
    from . import registry
    from .config import Overrides, Settings
    from .rule import rule_options_from

    parsed: dict[str, dict[str, Any]] = {}
    for key, values in (options or {}).items():
        rule = registry.lookup(key)
        if rule is None:
            raise ValueError(f"unknown rule {key!r}")
        parsed[rule.name] = rule_options_from(rule, values)
    overrides = Overrides(
        select=list(select) if select is not None else None,
        ignore=list(ignore),
        rule_options=parsed,
        unsafe_fixes=unsafe,
    )
    settings = Settings(
        overrides, config_path=Path(config) if config else None, isolated=config is None
    )
    return settings.for_file(Path(path) if path else None)


def check(
    source: str | bytes,
    *,
    path: str | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    config: str | Path | None = None,
) -> list[Diagnostic]:
    """Findings in ``source``. Configuration files are read only if ``config`` names one."""
    from . import engine

    settings = _settings(path, select, ignore, options, False, config)
    return engine.lint(source, path or "<string>", settings)


def fix(
    source: str | bytes,
    *,
    path: str | None = None,
    unsafe: bool = False,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    config: str | Path | None = None,
) -> FixResult:
    """Apply the safe fixes (and unsafe ones if ``unsafe``) to ``source``."""
    from . import engine

    settings = _settings(path, select, ignore, options, unsafe, config)
    outcome = engine.fix(source, path or "<string>", settings)
    return FixResult(outcome.fixed, outcome.applied, outcome.diagnostics)
