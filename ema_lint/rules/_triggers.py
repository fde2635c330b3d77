"""Trigger tokens shared by the value rules, derived from the API table.

A file can hold a finding of a value rule only if it names an API that takes an averaging
weight: its class or function name, a config registry name (``'EMAHook'``), or, for
optimizers whose averaging is switched on by an argument (Keras ``use_ema``), that
argument. The tokens are computed from the table so that adding a library keeps the
pre-filter sound.
"""

from __future__ import annotations

from ..analysis.apis import API_SPECS, Role


def _weight_triggers() -> tuple[bytes, ...]:
    tokens: set[str] = set()
    for spec in API_SPECS:
        if spec.weight is None and spec.forwards_to is None:
            continue
        if spec.role is Role.GRADIENT_EMA:
            continue  # never a weight-EMA finding
        if spec.weight is not None and spec.weight.enabled_when is not None:
            tokens.add(spec.weight.enabled_when[0])
            continue
        tokens.add(spec.short_name)
        tokens.update(name.rsplit(".", 1)[-1] for name in spec.registry_names)
    # Forwarding hooks build these classes from config strings.
    for spec in API_SPECS:
        if spec.registry_names and spec.weight is not None:
            tokens.update(name.rsplit(".", 1)[-1] for name in spec.registry_names)
    return tuple(sorted(t.encode() for t in tokens))


WEIGHT_TRIGGERS = _weight_triggers()


def _object_triggers() -> tuple[bytes, ...]:
    """Tokens of every averaging object: an API that creates one, or a hand-made copy."""
    tokens = {t.decode() for t in WEIGHT_TRIGGERS}
    for spec in API_SPECS:
        if spec.role in (Role.EMA_MODEL, Role.SWA_MODEL, Role.EMA_CALLBACK, Role.SWA_CALLBACK):
            tokens.add(spec.short_name)
    tokens.add("deepcopy")
    return tuple(sorted(t.encode() for t in tokens))


OBJECT_TRIGGERS = _object_triggers()
