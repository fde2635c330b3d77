"""ema-lint: find and fix misconfigured weight averaging (EMA, SWA) in training code.

The Python API, for editors and other tools::

    import ema_lint

    for d in ema_lint.check(source, path="train.py"):
        print(d.line, d.column, d.code, d.message)

    result = ema_lint.fix(source)
    new_source = result.source

``path`` names the file the source comes from: it selects the per-file configuration
(``per-file-ignores``) and the kind of source: a path ending in ``.ipynb`` reads ``source`` as
a notebook's JSON (findings carry their ``cell``; ``fix`` returns the notebook's JSON), and
``.yaml``/``.yml`` as a training config (Lightning CLI, Hydra). Any other path, or none, is
Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
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


# ``import ema_lint`` stays cheap (the command, the flake8 plugin and the cache load it for
# every run): the finding types are loaded on first use, the engine when something is checked.
_LAZY = {"Applicability", "Diagnostic", "Fix", "Position"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import diagnostics

        value = getattr(diagnostics, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    from .config import ConfigError, Overrides, Settings
    from .options import rule_options_from

    parsed: dict[str, dict[str, Any]] = {}
    for key, values in (options or {}).items():
        rule = registry.info(key)
        if rule is None:
            raise ValueError(f"unknown rule {key!r}")
        parsed[rule.name] = rule_options_from(rule, values)
    overrides = Overrides(
        select=list(select) if select is not None else None,
        ignore=list(ignore),
        rule_options=parsed,
        unsafe_fixes=unsafe,
    )
    try:
        settings = Settings(
            overrides, config_path=Path(config) if config else None, isolated=config is None
        )
        return settings.for_file(Path(path) if path else None)
    except ConfigError as error:  # an unknown rule, a bad configuration file
        raise ValueError(str(error)) from None


def check(
    source: str | bytes,
    *,
    path: str | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] = (),
    options: Mapping[str, Mapping[str, Any]] | None = None,
    config: str | Path | None = None,
) -> list[Diagnostic]:
    """Findings in ``source``, sorted by position.

    ``select``/``ignore`` take codes, prefixes or rule names; ``options`` maps a rule (code or
    name) to its options, e.g. ``{"EMA101": {"min": 0.99}}``. Configuration files are read
    only if ``config`` names one. Raises ``ValueError`` for an unknown rule or option; a
    file that cannot be read (invalid YAML, a syntax error) is an ``EMA901`` finding.
    """
    from . import engine, sources

    settings = _settings(path, select, ignore, options, False, config)
    source_kind = sources.for_path(path) if path else None
    if source_kind is not None:
        outcome = source_kind.lint(_as_bytes(source), path or "", settings)
        _raise_for_note(outcome.note)
        return outcome.diagnostics
    return engine.lint(source, path or "<string>", settings)


def _as_bytes(source: str | bytes) -> bytes:
    return source.encode("utf-8") if isinstance(source, str) else source


def _raise_for_note(note: str | None) -> None:
    if note is not None:
        raise ImportError(note)


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
    """Apply the safe fixes (and unsafe ones if ``unsafe``) to ``source``.

    The result's ``source`` has the type of the input (``str`` or ``bytes``) and is the input
    itself when nothing was fixed; its ``diagnostics`` are what is left after fixing, plus
    ``EMA903`` for a fix that was refused because it would break the file.
    """
    from . import engine, sources

    settings = _settings(path, select, ignore, options, unsafe, config)
    source_kind = sources.for_path(path) if path else None
    if source_kind is not None:
        done = source_kind.fix(_as_bytes(source), path or "", settings)
        _raise_for_note(done.note)
        new: str | bytes = source
        if done.fixed is not None:
            new = done.fixed.decode("utf-8") if isinstance(source, str) else done.fixed
        return FixResult(new, done.applied if new != source else 0, done.diagnostics)
    outcome = engine.fix(source, path or "<string>", settings)
    return FixResult(outcome.fixed, outcome.applied, outcome.diagnostics)
