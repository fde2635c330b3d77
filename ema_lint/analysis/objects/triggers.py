"""What a file must contain for a family of rules to find anything in it (pre-filter evidence).

Each rule declares ``triggers`` (any of them admits the file) and ``trigger_groups`` (every
set of a group must be present). The families here are derived from the API table and the
naming vocabulary the analysis itself uses, so adding a library or a name keeps the filter
sound. The evidence, from strongest to broadest:

- an averaging **API** is found only through its import (``names.ImportTable``): the file
  holds the API's name as an identifier AND the name of its top-level package (``timm``,
  ``torch``, ``ema_pytorch``...), which its import statement spells. A config registry name
  (``dict(type='EMAHook')``) needs no import and admits the file alone;
- a hand-made **copy** (``copy.deepcopy(model)``) is an averaging object only when a name
  says so (``ema_model``, ``encoder_k``, ``target_net``; the copy, its update's shadow, or
  the function or class that updates it): ``deepcopy`` AND an averaged name;
- a hand-written **update** reads a model's weights (``parameters``, ``state_dict``...) AND
  names an average;
- a hand-made **shadow** that is no copy (a dict of tensors named ``ema_params``) is found by
  its name alone: the loop rules, which also need their own evidence (``backward(``), take
  it too.

``requiring(tokens, evidence)`` makes the groups of a rule that needs its own tokens AND one
piece of evidence (EMA201: ``cpu`` and an averaging object).
"""

from __future__ import annotations

from dataclasses import dataclass

from ema_lint.analysis.objects.apis import API_SPECS, ApiSpec, Role
from ema_lint.analysis.syntax.vocabulary import (
    AVERAGE_COMPOUNDS,
    AVERAGED_CODE_NAME,
    AVERAGED_NAME,
    NAMED_AVERAGE,
)
from ema_lint.prefilter import identifier

Group = tuple[tuple[bytes, ...], ...]


@dataclass(frozen=True)
class Evidence:
    """Triggers (any admits a file) and groups (all sets of one admit it)."""

    triggers: tuple[bytes, ...] = ()
    groups: tuple[Group, ...] = ()

    def __or__(self, other: Evidence) -> Evidence:
        triggers = tuple(dict.fromkeys((*self.triggers, *other.triggers)))
        groups = tuple(dict.fromkeys((*self.groups, *other.groups)))
        return Evidence(triggers, groups)


def requiring(tokens: tuple[bytes, ...], evidence: Evidence) -> tuple[Group, ...]:
    """Groups admitting a file that holds one of ``tokens`` AND a piece of ``evidence``.

    ``tokens`` come first in every group: they are tested first, so they should be rare."""
    groups: list[Group] = []
    if evidence.triggers:
        groups.append((tokens, evidence.triggers))
    groups.extend((tokens, *group) for group in evidence.groups)
    return tuple(groups)


def _roots(spec: ApiSpec) -> set[str]:
    return {name.split(".", 1)[0] for name in (spec.qualname, *spec.aliases)}


def _api_evidence(specs: list[tuple[ApiSpec, set[str]]]) -> Evidence:
    """The names of these APIs, each with its package; registry names alone."""
    by_root: dict[str, set[str]] = {}
    registry: set[str] = set()
    for spec, tokens in specs:
        for root in _roots(spec):
            by_root.setdefault(root, set()).update(tokens)
        registry.update(name.rsplit(".", 1)[-1] for name in spec.registry_names)
    # One group per set of names, with every package that provides one of them.
    by_names: dict[tuple[str, ...], set[str]] = {}
    for root, tokens in by_root.items():
        by_names.setdefault(tuple(sorted(tokens)), set()).add(root)
    groups = tuple(
        (
            tuple(identifier(t) for t in tokens),
            tuple(root.encode() for root in sorted(roots)),
        )
        for tokens, roots in sorted(by_names.items())
    )
    return Evidence(tuple(identifier(t) for t in sorted(registry)), groups)


def _weight_apis() -> list[tuple[ApiSpec, set[str]]]:
    """The APIs whose averaging weight the value rules judge, with the names that find them."""
    found: list[tuple[ApiSpec, set[str]]] = []
    for spec in API_SPECS:
        if spec.weight is None and spec.forwards_to is None:
            continue
        if spec.role is Role.GRADIENT_EMA:
            continue  # never a weight-EMA finding
        if spec.weight is not None and spec.weight.enabled_when is not None:
            found.append((spec, {spec.weight.enabled_when[0]}))  # Keras ``use_ema=True``
        else:
            found.append((spec, {spec.short_name}))
    return found


def _object_apis() -> list[tuple[ApiSpec, set[str]]]:
    found = _weight_apis()
    creating = (Role.EMA_MODEL, Role.SWA_MODEL, Role.EMA_CALLBACK, Role.SWA_CALLBACK)
    found.extend((spec, {spec.short_name}) for spec in API_SPECS if spec.role in creating)
    return found


_COMPOUNDS = tuple(c.encode() for c in AVERAGE_COMPOUNDS)
# A name that says "averaged", or a compound that names an averaging update.
AVERAGED_NAMES = (AVERAGED_NAME, *_COMPOUNDS)
_WEIGHT_METHOD_TOKENS = (b"parameters", b"state_dict", b"buffers", b"variables")

# EMA103: an API that takes an averaging weight.
WEIGHT_EVIDENCE = _api_evidence(_weight_apis())
# An averaging object: an API that makes one, or a copy named as averaged.
OBJECT_EVIDENCE = _api_evidence(_object_apis()) | Evidence(
    groups=(((identifier("deepcopy"),), AVERAGED_NAMES),)
)
# The coefficients of an average are written as a complement (``1 - d``), a lerp or a running
# mean's ``1 / n``: without one, weights read or "return" next to an averaged-looking name
# (timm's ``global_pool='avg'``, Adam's ``exp_avg``) hold in most files of a model library,
# and each would be parsed for nothing.
_COMPLEMENT = (b"1 -", b"1-", b"1.0 -", b"1.0-", b"1. -", b"1.-", b"lerp", b"incremental_update")
_COEFFICIENTS = (*_COMPLEMENT, b"1 /", b"1/", b"1. /", b"1./", b"1.0 /", b"1.0/")
# Where ``averages_weights`` can hold: an object, or weights read into a named average.
# A running mean into a copy named ``swa_model`` / ``avg_model`` counts too (its arithmetic
# says it averages): weights read AND any averaged name. The loop rules admit every file with
# an averaged name already, so a default run parses no more files for it.
# A helper with neutral names that averages a ``deepcopy`` of the model a loop trains is
# recognised by its arithmetic and its calls alone: ``deepcopy``, weights read, a
# complement (or a lerp) and a training step: a ``backward(`` call or an optimizer's ``.step()``.
UPDATE_EVIDENCE = OBJECT_EVIDENCE | Evidence(
    groups=(
        (_WEIGHT_METHOD_TOKENS, (NAMED_AVERAGE, *_COMPOUNDS)),
        (_WEIGHT_METHOD_TOKENS, AVERAGED_NAMES, _COEFFICIENTS),
        ((identifier("deepcopy"),), (b"backward(", b".step()"), _WEIGHT_METHOD_TOKENS, _COMPLEMENT),
    )
)
# Any averaging object or update the loop rules follow, hand-made shadows included.
AVERAGING_EVIDENCE = UPDATE_EVIDENCE | Evidence(triggers=AVERAGED_NAMES)
# Updates that make a new value instead of writing in place, judged by their coefficients
# only: JAX's tree maps (whose trees may be ``state['ema']``) and helpers returning the
# average (``return ema * d + p * (1 - d)``), whose shadow is a parameter: a name of the
# code, which a value string (``global_pool='avg'``) is not.
FUNCTIONAL_UPDATE_EVIDENCE = UPDATE_EVIDENCE | Evidence(
    groups=(
        ((b"tree_map", b"tree.map", b"tree_multimap"), AVERAGED_NAMES, _COMPLEMENT),
        ((b"return",), (AVERAGED_CODE_NAME, *_COMPOUNDS), _COMPLEMENT),
    )
)
