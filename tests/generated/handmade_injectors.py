"""The bugs a hand-made EMA update can carry: one declarative entry per shape of each bug.

An :class:`Injector` says, for one rule code:

- ``slot``: the part of the :class:`~tests.generated.handmade_scripts.HandPlan` it
  controls: ``update`` (the arithmetic of the update: EMA301, EMA302), ``grad`` (the grad
  mode it runs in: EMA303), ``buffers`` (whether the BatchNorm buffers are kept current:
  EMA304), ``decay`` (the value of the decay: EMA101, EMA102), ``filter`` (a condition
  that keeps the update from some entries: EMA305). A slot holds at most one
  bug; a slot without one keeps the plan's correct code (every form of the update, every
  grad mode, every way of handling the buffers, a decay in range);
- ``forms``: the forms of the update it can be injected into, and ``excludes``: the codes
  it cannot share a script with;
- ``inject``: how it edits the plan, and ``tag``, the rendered line the finding must be
  reported on;
- ``fix``: what ``--fix`` does to it, exactly as the rule declares it for this shape.

Interactions kept out, so that the expected findings stay exact before and after ``--fix``:

- EMA301 only where the update runs under ``no_grad`` and the buffers are handled: the
  rebound name is a discarded update, which EMA303 and EMA304 do not judge, and its fix
  (``copy_``/``lerp_``) would make them report it;
- EMA101/EMA102 (slot ``decay``: the value of the plan's decay, wherever the plan writes
  it) do not share a script with EMA301 or EMA302: a rebound or swapped update is not judged
  for its decay, and their fixes would make it judged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import strategies as st

from tests.generated.handmade_scripts import (
    FILTER_KIND_FORMS,
    FILTER_NAME_FORMS,
    FORMS,
    ZIP_FORMS,
    HandPlan,
    _decay_name,
)
from tests.generated.scripts import Bug


@dataclass(frozen=True)
class Injector:
    code: str
    name: str
    slot: str
    tag: str
    fix: str | None
    forms: frozenset[str]  # the forms of the update it can be injected into
    inject: Callable[[HandPlan, Callable], None]
    excludes: frozenset[str] = frozenset()  # codes it cannot share a script with
    notes: str = ""

    def fits(self, others: list[Injector]) -> bool:
        return all(
            o.code not in self.excludes and self.code not in o.excludes and o.forms & self.forms
            for o in others
        )

    def apply(self, plan: HandPlan, draw: Callable) -> None:
        self.inject(plan, draw)
        plan.bugs.append(Bug(self.code, self.name, self.tag, self.fix))


def _statement(template: str) -> Callable[[HandPlan, Callable], None]:
    """Replace the update of one tensor; ``{e}``, ``{p}`` (the live tensor as read, detached
    or not), ``{raw}`` (not detached), ``{d}`` (the decay) and ``{torch}``."""

    def inject(plan: HandPlan, draw: Callable) -> None:
        n = plan.names
        raw = f"{n['msd']}[{n['name']}]" if plan.form in ("named", "state_dict") else n["p"]
        p = f"{raw}.detach()" if plan.grad == "detached" or plan.form == "state_dict" else raw
        plan.update = template.format(e=n["e"], p=p, raw=raw, d=_decay_name(plan), torch=n["torch"])

    return inject


# The swapped update in each form: the statement reported, and the ``mul_`` before it.
_SWAPPED = {
    "mul_add": ("{e}.mul_(1 - {d}).add_({p}, alpha={d})", None),
    "named": ("{e}.mul_(1 - {d}).add_({p}, alpha={d})", None),
    "state_dict": ("{e}.mul_(1 - {d}).add_({p}, alpha={d})", None),
    "two_step": ("{e}.add_({p}, alpha={d})", "{e}.mul_(1 - {d})"),
    "lerp": ("{e}.lerp_({p}, {d})", None),
    "named_zip": ("{e}.lerp_({p}, {d})", None),
    "copy": ("{e}.copy_((1 - {d}) * {e} + {d} * {p})", None),
    "data": ("{e}.data = (1 - {d}) * {e}.data + {d} * {raw}.data", None),
    "foreach": (
        "{torch}._foreach_add_(ema_params, live_params, alpha={d})",
        "{torch}._foreach_mul_(ema_params, 1 - {d})",
    ),
    "foreach_lerp": ("{torch}._foreach_lerp_(ema_params, live_params, {d})", None),
}


def _swapped(plan: HandPlan, draw: Callable) -> None:
    second, first = _SWAPPED[plan.form]
    _statement(second)(plan, draw)
    if first is not None:
        plan.first = first.format(e=plan.names["e"], d=_decay_name(plan), torch=plan.names["torch"])


def _no_grad(plan: HandPlan, draw: Callable) -> None:
    plan.grad = "none"
    if plan.form == "named" or plan.form in ZIP_FORMS:  # the "raises" shape too
        plan.freeze = draw(st.sampled_from([plan.freeze, "none"]))


def _stale_buffers(plan: HandPlan, draw: Callable) -> None:
    plan.batchnorm = True
    plan.buffers = "none"


_REBINDABLE = frozenset({"mul_add", "lerp", "copy", "named", "named_zip", "state_dict"})
# ``.data =`` writes and ``state_dict()`` tensors are not recorded by autograd.
_RECORDED = frozenset(FORMS) - {"data", "state_dict"}


INJECTORS: tuple[Injector, ...] = (
    Injector(
        "EMA301",
        "rebind-combination",
        "update",
        "update",
        "safe",
        forms=_REBINDABLE,
        excludes=frozenset({"EMA303", "EMA304"}),
        inject=_statement("{e} = {d} * {e} + (1 - {d}) * {p}"),
    ),
    Injector(
        "EMA301",
        "rebind-lerp",
        "update",
        "update",
        "safe",
        forms=_REBINDABLE,
        excludes=frozenset({"EMA303", "EMA304"}),
        inject=_statement("{e} = {e}.lerp({p}, 1 - {d})"),
    ),
    Injector(
        "EMA302",
        "coefficients-swapped",
        "update",
        "update",
        "safe",
        forms=frozenset(_SWAPPED),
        inject=_swapped,
        notes="the decay on the live weights and its complement on the average, in the "
        "plan's form (lerp's weight a decay); the fix exchanges or complements them",
    ),
    Injector(
        "EMA302",
        "alpha-missing",
        "update",
        "update",
        None,
        forms=frozenset({"mul_add", "named", "state_dict"}),
        inject=_statement("{e}.mul_({d}).add_({p})"),
        notes="add_ without alpha= adds the live weights whole: no fix can tell the intent",
    ),
    Injector(
        "EMA303",
        "update-outside-no-grad",
        "grad",
        "update",
        "safe",
        forms=_RECORDED,
        inject=_no_grad,
    ),
    Injector(
        "EMA304",
        "parameters-only-zip",
        "buffers",
        "loop",
        "unsafe",
        forms=ZIP_FORMS,
        inject=_stale_buffers,
    ),
    Injector(
        "EMA304",
        "parameters-only-named",
        "buffers",
        "loop",
        None,
        forms=frozenset({"named"}),
        inject=_stale_buffers,
        notes="the fix is offered only for a zip of the two models' parameters()",
    ),
    Injector(
        "EMA304",
        "parameters-only-foreach",
        "buffers",
        "update",
        None,
        forms=frozenset({"foreach", "foreach_lerp"}),
        inject=_stale_buffers,
    ),
)


def _decay(*values: str) -> Callable[[HandPlan, Callable], None]:
    """Set the plan's decay (a constant, an argparse default, a helper's default, or the
    literal at the update or its call) to one of ``values``."""

    def inject(plan: HandPlan, draw: Callable) -> None:
        plan.decay = draw(st.sampled_from(values))

    return inject


_NOT_JUDGED = frozenset({"EMA301", "EMA302"})

INJECTORS += (
    Injector(
        "EMA101",
        "decay-too-low",
        "decay",
        "update",
        "unsafe",
        forms=frozenset(FORMS),
        excludes=_NOT_JUDGED,
        inject=_decay("0.9", "0.95", "0.99", "0.995"),
        notes="an average over 10 to 200 updates; the fix writes the lower bound where the "
        "value is written (both literals of a literal pair)",
    ),
    Injector(
        "EMA101",
        "decay-too-high",
        "decay",
        "update",
        "unsafe",
        forms=frozenset(FORMS),
        excludes=_NOT_JUDGED,
        inject=_decay("0.99999", "0.999995"),
        notes="the run length is unknown (EPOCHS x len(loader)), so the upper bound applies",
    ),
    Injector(
        "EMA102",
        "decay-invalid",
        "decay",
        "update",
        None,
        forms=frozenset(FORMS),
        excludes=_NOT_JUDGED,
        inject=_decay("1.0", "1", "1.5"),
        notes="a frozen average (1) or one outside [0, 1]: no fix can tell the intent",
    ),
)


def _filter(kind: str) -> Callable[[HandPlan, Callable], None]:
    def inject(plan: HandPlan, draw: Callable) -> None:
        plan.filter = kind

    return inject


INJECTORS += (
    Injector(
        "EMA305",
        "average-matrices-only",
        "filter",
        "filter",
        None,
        forms=FILTER_KIND_FORMS,
        excludes=frozenset({"EMA301"}),
        inject=_filter("kind"),
        notes="``if p.ndim > 1:`` around the update: biases and norm weights never move",
    ),
    Injector(
        "EMA305",
        "average-weights-by-name",
        "filter",
        "filter",
        None,
        forms=FILTER_NAME_FORMS,
        excludes=frozenset({"EMA301"}),
        inject=_filter("name"),
    ),
    Injector(
        "EMA305",
        "skip-biases-by-name",
        "filter",
        "filter",
        None,
        forms=FILTER_NAME_FORMS,
        excludes=frozenset({"EMA301"}),
        inject=_filter("name-continue"),
    ),
)

SLOTS = ("decay", "update", "grad", "buffers", "filter")
