"""Hand-written in-place averaging updates: the shadow, the source and the weights."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.objects.updates import InPlaceUpdates
from tests.analysis.helpers import context


def code(node) -> str:
    return "" if node is None else cst.Module([]).code_for_node(node)


def weight(coefficient) -> str:
    if coefficient is None:
        return ""
    text = code(coefficient.expr)
    return f"1 - ({text})" if coefficient.complement else text


@pytest.mark.parametrize(
    ("statement", "form", "old", "new"),
    [
        ("e.mul_(d).add_(p, alpha=1 - d)", "mul_add", "d", "1 - d"),
        ("e.data.mul_(d).add_(p.data, alpha=1 - d)", "mul_add", "d", "1 - d"),
        ("e.mul_(alpha).add_(1 - alpha, p)", "mul_add", "alpha", "1 - alpha"),
        ("e.mul_(d).add_(p * (1 - d))", "mul_add", "d", "(1 - d)"),
        ("e.lerp_(p, 1 - d)", "lerp", "1 - (1 - d)", "1 - d"),
        ("e.copy_(e * d + p * (1 - d))", "copy", "d", "(1 - d)"),
        ("e.copy_(p.detach().lerp(e, beta))", "copy", "beta", "1 - (beta)"),
        ("e.sub_((e - p) * (1 - d))", "sub", "1 - ((1 - d))", "(1 - d)"),
        ("e.data = d * e.data + (1 - d) * p.data", "assign", "d", "(1 - d)"),
        ("torch.lerp(e, p, 1 - d, out=e)", "lerp", "1 - (1 - d)", "1 - d"),
        ("torch.lerp(p.detach(), e, weight=d, out=e)", "lerp", "d", "1 - (d)"),
        ("e = e - (1 - d) * (e - p)", "assign", "1 - ((1 - d))", "(1 - d)"),
        ("e = e + (p - e) * k", "assign", "1 - (k)", "k"),
    ],
)
def test_update_forms(statement: str, form: str, old: str, new: str) -> None:
    source = f"for e, p in zip(ema.parameters(), model.parameters()):\n    {statement}\n"
    ctx = context(source)
    [update] = ctx.get(InPlaceUpdates).updates
    assert update.form == form
    assert weight(update.old_weight) == old
    assert weight(update.new_weight) == new
    assert code(update.shadow_container) == "ema"
    assert code(update.source_container) == "model"


def test_two_statement_update_and_foreach() -> None:
    ctx = context(
        "for ema_v, model_v in zip(ema.state_dict().values(), model.state_dict().values()):\n"
        "    ema_v.mul_(decay)\n"
        "    ema_v.add_(model_v, alpha=1 - decay)\n"
        "torch._foreach_lerp_(ema_params, params, weight=1 - decay)\n"
    )
    first, second = ctx.get(InPlaceUpdates).updates
    assert first.form == "mul_add" and code(first.old_weight.expr) == "decay"
    assert second.form == "foreach" and code(second.shadow) == "ema_params"


def test_not_averaging() -> None:
    ctx = context("x.add_(y)\np.mul_(0.5)\nloss = a + b\nw.data.copy_(v)\n")
    assert ctx.get(InPlaceUpdates).updates == []


def test_not_averaging_lerp_into_another_tensor_or_a_plain_step() -> None:
    ctx = context(
        "torch.lerp(a, b, w, out=c)\n"
        "torch.lerp(a, b, w)\n"
        "p = p - lr * (g - m)\n"
        "p = p - (1 - d) * (q - r)\n"
    )
    # The bare ``torch.lerp`` is only a candidate for a dropped average (EMA301 judges
    # whether ``a`` is averaged weights); nothing here writes one in place.
    assert [u.dropped for u in ctx.get(InPlaceUpdates).updates] == [True]


@pytest.mark.parametrize(
    ("statement", "weights"),
    [
        ("e.lerp(p, 1 - d)", ("1 - d", True, "1 - d", False)),
        ("torch.lerp(e, p, 1 - d)", ("1 - d", True, "1 - d", False)),
        ("e.sub((1 - d) * (e - p))", ("(1 - d)", True, "(1 - d)", False)),
        ("e.mul(d).add(p, alpha=1 - d)", ("d", False, "1 - d", False)),
    ],
)
def test_dropped_out_of_place_average(statement: str, weights: tuple) -> None:
    ctx = context(
        f"for e, p in zip(ema.parameters(), model.parameters()):\n    {statement}\n"
        f"for e, p in zip(ema.parameters(), model.parameters()):\n    kept = {statement}\n"
        f"for a, b in zip(xs, ys):\n    a.add(b)\n"
    )
    found = [u for u in ctx.get(InPlaceUpdates).updates if u.dropped]
    assert len(found) == 1
    update = found[0]
    assert (code(update.shadow), code(update.source)) == ("e", "p")
    assert side(update) == ("ema", "parameters", "model", "parameters")
    assert update.old_weight is not None and update.new_weight is not None
    got = (
        code(update.old_weight.expr),
        update.old_weight.complement,
        code(update.new_weight.expr),
        update.new_weight.complement,
    )
    assert got == weights


def side(update) -> tuple[str, str | None, str, str | None]:
    return (
        code(update.shadow_container),
        update.shadow_method,
        code(update.source_container),
        update.source_method,
    )


@pytest.mark.parametrize(
    ("loop", "statement", "sides"),
    [
        (
            "for (n, e), (_, p) in zip(ema.named_parameters(), model.named_parameters()):",
            "e.mul_(d).add_(p, alpha=1 - d)",
            ("ema", "named_parameters", "model", "named_parameters"),
        ),
        (
            "for k, v in ema.state_dict().items():",
            "v.mul_(d).add_(msd[k].detach(), alpha=1 - d)",
            ("ema", "state_dict", "model", "state_dict"),
        ),
        (
            "for e, p in zip(ema_params, params, strict=True):",
            "e.lerp_(p, 1 - d)",
            ("ema", "parameters", "model", "parameters"),
        ),
        (
            "for name, p in model.named_parameters():",
            "shadow[name].mul_(d).add_(p, alpha=1 - d)",
            ("shadow", None, "model", "named_parameters"),
        ),
    ],
)
def test_what_each_side_is_iterated_from(loop: str, statement: str, sides) -> None:
    ctx = context(
        "msd = model.state_dict()\n"
        "ema_params = list(ema.parameters())\n"
        "params = [p for p in model.parameters() if p.requires_grad]\n"
        "shadow = {n: p.detach().clone() for n, p in model.named_parameters()}\n"
        f"{loop}\n    {statement}\n"
    )
    [update] = ctx.get(InPlaceUpdates).updates
    assert side(update) == sides
    assert update.loop is not None


@pytest.mark.parametrize(
    ("statement", "form", "old", "new", "away"),
    [
        ("e.add_(p - e, alpha=1 - d)", "add", "1 - (1 - d)", "1 - d", False),
        ("e.add_((p - e) * k)", "add", "1 - (k)", "k", False),
        ("e.add_(k, p - e)", "add", "1 - (k)", "k", False),
        ("e.add_((e - p) * (1 - d))", "add", "1 - ((1 - d))", "(1 - d)", True),
        ("e.sub_((p - e) * (1 - d))", "sub", "1 - ((1 - d))", "(1 - d)", True),
        ("e -= (1 - d) * (e - p)", "augassign", "1 - ((1 - d))", "(1 - d)", False),
        ("e += (1 - d) * (e - p)", "augassign", "1 - ((1 - d))", "(1 - d)", True),
        ("e.mul_(d).add_(p)", "mul_add", "d", "1", False),
        ("e = e.lerp(p, 1 - d)", "assign", "1 - (1 - d)", "1 - d", False),
        ("e = p.detach().lerp(e, d)", "assign", "d", "1 - (d)", False),
    ],
)
def test_difference_implicit_and_rebinding_forms(
    statement: str, form: str, old: str, new: str, away: bool
) -> None:
    ctx = context(f"for e, p in zip(ema.parameters(), model.parameters()):\n    {statement}\n")
    [update] = ctx.get(InPlaceUpdates).updates
    assert (update.form, weight(update.old_weight), weight(update.new_weight)) == (form, old, new)
    assert update.away is away


def test_two_statement_forms_record_their_first_call() -> None:
    ctx = context(
        "torch._foreach_mul_(ema_params, decay)\n"
        "torch._foreach_add_(ema_params, params, alpha=1 - decay)\n"
        "for e, p in zip(ema.parameters(), model.parameters()):\n"
        "    e *= d\n"
        "    e += (1 - d) * p\n"
    )
    provider = ctx.get(InPlaceUpdates)
    foreach, augmented = provider.updates
    assert code(foreach.old_weight.expr) == "decay" and code(foreach.first) == (
        "torch._foreach_mul_(ema_params, decay)"
    )
    assert len(provider.statements(foreach)) == 2
    assert augmented.form == "augassign" and code(augmented.old_weight.expr) == "d"


def test_foreach_on_lists_built_in_place() -> None:
    ctx = context("torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.1)\n")
    [update] = ctx.get(InPlaceUpdates).updates
    assert side(update) == ("ema", "parameters", "model", "parameters")


def test_update_through_a_temporary() -> None:
    ctx = context(
        "class EMA:\n"
        "    def update(self):\n"
        "        for name, param in self.model.named_parameters():\n"
        "            new_average = (1.0 - self.decay) * param.data"
        " + self.decay * self.shadow[name]\n"
        "            self.shadow[name] = new_average.clone()\n"
    )
    provider = ctx.get(InPlaceUpdates)
    [update] = provider.updates
    assert code(update.shadow) == "self.shadow[name]" and code(update.source) == "param.data"
    assert code(update.old_weight.expr) == "self.decay"
    assert update.temp is not None and len(provider.statements(update)) == 2
    assert provider.discarded(update) is None


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            "for e, p in zip(ema.parameters(), model.parameters()):\n    e = d * e + (1 - d) * p\n",
            "loop variable",
        ),
        (
            "for e, p in zip(ema.parameters(), model.parameters()):\n    e = e.lerp(p, 1 - d)\n",
            "loop variable",
        ),
        (
            "sd = ema.state_dict()\n"
            "for k, v in model.state_dict().items():\n"
            "    if k in sd and len(sd):\n"
            "        sd[k] = d * sd[k] + (1 - d) * v\n",
            "state_dict",
        ),
        (
            "ema_params = dict(ema.named_parameters())\n"
            "for n, p in model.named_parameters():\n"
            "    ema_params[n] = d * ema_params[n] + (1 - d) * p\n",
            "state_dict",
        ),
        (
            "for name, p in model.named_parameters():\n"
            "    s = ema_sd[name]\n"
            "    s = d * s + (1 - d) * p\n",
            "local name",
        ),
        # Written to, but read back: the average is used.
        (
            "for e, p in zip(ema.parameters(), model.parameters()):\n"
            "    e = d * e + (1 - d) * p\n"
            "    out.append(e)\n",
            None,
        ),
        # An inner loop reads the rebound name on its next iteration.
        (
            "for e, p in zip(ema.parameters(), model.parameters()):\n"
            "    for _ in range(2):\n"
            "        e = d * e + (1 - d) * p\n",
            None,
        ),
        (
            "sd = ema.state_dict()\n"
            "for k, v in model.state_dict().items():\n"
            "    sd[k] = d * sd[k] + (1 - d) * v\n"
            "ema.load_state_dict(sd)\n",
            None,
        ),
        # A dict of copies is the average itself.
        (
            "shadow = {k: v.clone() for k, v in model.state_dict().items()}\n"
            "for k, v in model.state_dict().items():\n"
            "    shadow[k] = d * shadow[k] + (1 - d) * v\n",
            None,
        ),
        (
            "for e, p in zip(ema.parameters(), model.parameters()):\n"
            "    e.data = d * e.data + (1 - d) * p.data\n",
            None,
        ),
    ],
)
def test_discarded_results(body: str, why: str | None) -> None:
    source = "def update(ema, model, ema_sd, d, out):\n" + "".join(
        f"    {line}\n" for line in body.splitlines()
    )
    provider = context(source).get(InPlaceUpdates)
    [update] = provider.updates
    assert provider.discarded(update) == why


def test_rebound_parameter_is_discarded_unless_returned() -> None:
    provider = context(
        "def step(e, p, d):\n    e = d * e + (1 - d) * p\n"
        "def step_returned(e, p, d):\n    e = d * e + (1 - d) * p\n    return e\n"
        "smoothed = 0.0\n"
        "for loss in losses:\n    smoothed = 0.9 * smoothed + 0.1 * loss\n"
    ).get(InPlaceUpdates)
    first, second, third = provider.updates
    assert provider.discarded(first) == "local name"
    assert provider.discarded(second) is None
    assert provider.discarded(third) is None  # module-level name read on the next iteration


def test_not_averaging_difference_and_optimizer_forms() -> None:
    ctx = context(
        "buf.mul_(momentum).add_(grad)\n"  # SGD momentum: recognised, judged by the rules
        "p.add_(grad, alpha=-lr)\n"
        "x.sub_(y)\n"
        "z.add_((a - b) * 0.5)\n"
    )
    [update] = ctx.get(InPlaceUpdates).updates
    assert code(update.shadow) == "buf" and update.shadow_container is None


@pytest.mark.parametrize("statement", ["e.mul_(d).add_(w)", "e.mul_(d)\n    e.add_(w)"])
def test_a_short_loop_variable_added_whole_is_the_tensor(statement: str) -> None:
    """``for e, w in zip(...)``: ``add_(w)`` adds the live tensor (alpha 1), not a weight."""
    source = f"for e, w in zip(ema.parameters(), model.parameters()):\n    {statement}\n"
    [update] = context(source).get(InPlaceUpdates).updates
    assert code(update.source) == "w" and weight(update.new_weight) == "1"
    outside = context("w = 0.5\ne.mul_(d).add_(w)\n").get(InPlaceUpdates).updates
    assert outside == []


@pytest.mark.parametrize(
    ("statement", "form", "old", "new"),
    [
        ("e = e.mul(d).add(p, alpha=1 - d)", "assign", "d", "1 - d"),
        ("e = e.sub((1 - d) * (e - p))", "assign", "1 - ((1 - d))", "(1 - d)"),
    ],
)
def test_out_of_place_forms(statement: str, form: str, old: str, new: str) -> None:
    source = f"for e, p in zip(ema.parameters(), model.parameters()):\n    {statement}\n"
    updates = context(source).get(InPlaceUpdates)
    [update] = updates.updates
    assert (update.form, weight(update.old_weight), weight(update.new_weight)) == (form, old, new)
    assert updates.discarded(update) == "loop variable"


def test_rebinding_first_half() -> None:
    source = "for k, v in ema.state_dict().items():\n    v = v * d\n    v += (1 - d) * msd[k]\n"
    updates = context(source).get(InPlaceUpdates)
    [update] = updates.updates
    assert update.rebind is not None and code(update.rebind.value) == "v * d"
    assert updates.discarded(update) == "loop variable"
    assert updates.rebinding(update) is update.rebind


def test_rebinding_kept_when_read() -> None:
    source = (
        "for k, v in ema.state_dict().items():\n"
        "    v = v * d\n"
        "    v += (1 - d) * msd[k]\n"
        "    out[k] = v\n"
    )
    updates = context(source).get(InPlaceUpdates)
    [update] = updates.updates
    assert updates.discarded(update) is None


def test_ordered_dict_and_source_alias() -> None:
    source = (
        "ema_params = OrderedDict(ema_model.named_parameters())\n"
        "for name, param in OrderedDict(model.named_parameters()).items():\n"
        "    live = param.data\n"
        "    ema_params[name].mul_(decay).add_(live, alpha=1 - decay)\n"
    )
    [update] = context(source).get(InPlaceUpdates).updates
    assert (code(update.shadow_container), update.shadow_method) == (
        "ema_model",
        "named_parameters",
    )
    assert (code(update.source_container), update.source_method) == ("model", "named_parameters")


def test_jax_tree_map_shadow_is_the_averaged_tree() -> None:
    source = "new = jax.tree.map(lambda p, e: d * p + (1 - d) * e, params, ema_params)\n"
    [update] = context(source).get(InPlaceUpdates).updates
    assert update.form == "tree_map"
    assert (code(update.shadow), weight(update.old_weight)) == ("ema_params", "(1 - d)")


def test_scaled_difference() -> None:
    source = (
        "for s, p in zip(shadow_params, params):\n"
        "    tmp = s - p\n"
        "    tmp.mul_(k)\n"
        "    s.sub_(tmp)\n"
    )
    [update] = context(source).get(InPlaceUpdates).updates
    assert (update.form, weight(update.new_weight), update.away) == ("sub", "k", False)


@pytest.mark.parametrize(
    ("first", "second", "old", "new", "rebind"),
    [
        ("e.data.add_(-k * e.data)", "e.data.add_(k * p.data)", "1 - (k)", "k", False),
        ("e.sub_(k * e)", "e.add_(k * p)", "1 - (k)", "k", False),
        ("e.sub_(e * inv)", "e.add_(p, alpha=inv)", "1 - (inv)", "inv", False),
        ("e = e.data.add(-k * e.data)", "e.data.add_(k * p.data)", "1 - (k)", "k", True),
    ],
)
def test_running_mean_halves(first: str, second: str, old: str, new: str, rebind: bool) -> None:
    """SWA's running mean as two statements: the average scaled by 1 - k, then k of the model
    added (k = 1 / n, whatever it is called)."""
    ctx = context(
        f"for e, p in zip(swa.parameters(), model.parameters()):\n    {first}\n    {second}\n"
    )
    updates = ctx.get(InPlaceUpdates)
    [update] = updates.updates
    assert weight(update.old_weight) == old
    assert weight(update.new_weight) == new
    assert code(update.source_container) == "model"
    assert (update.rebind is not None) is rebind
    assert (updates.discarded(update) == "loop variable") is rebind
    assert len(updates.statements(update)) == 2


def test_running_mean_second_half_rebound() -> None:
    ctx = context(
        "for e, p in zip(swa.parameters(), model.parameters()):\n"
        "    e.data.add_(-k * e.data)\n"
        "    e = e.data.add(k * p.data)\n"
    )
    updates = ctx.get(InPlaceUpdates)
    [update] = updates.updates
    assert update.form == "assign" and weight(update.old_weight) == "1 - (k)"
    assert updates.discarded(update) == "loop variable"


def test_a_lone_scaling_is_no_update() -> None:
    ctx = context(
        "for e, p in zip(swa.parameters(), model.parameters()):\n"
        "    e.add_(-k * e)\n"
        "    e.add_(k * e)\n"  # the same tensor on both sides: no source
    )
    assert ctx.get(InPlaceUpdates).updates == []


def test_lists_filled_in_a_loop_keep_their_model() -> None:
    ctx = context(
        "def update(self, model, d):\n"
        "    live = model.state_dict()\n"
        "    ema_v, model_v = [], []\n"
        "    for k, v in self.ema.state_dict().items():\n"
        "        ema_v.append(v)\n"
        "        model_v.append(live[k])\n"
        "    self._pairs = ema_v, model_v\n"
        "    ema_v, model_v = self._pairs\n"
        "    for v, m in zip(ema_v, model_v):\n"
        "        v.mul_(d).add_(m, alpha=1 - d)\n"
        "    clones = []\n"
        "    for p in model.parameters():\n"
        "        clones.append(p.detach().clone())\n"
        "    for c, p in zip(clones, model.parameters()):\n"
        "        c.mul_(d).add_(p, alpha=1 - d)\n"
    )
    first, second = ctx.get(InPlaceUpdates).updates
    assert (code(first.shadow_container), first.shadow_method) == ("self.ema", "state_dict")
    assert code(first.source_container) == "model"
    assert first.source_method == "state_dict"
    # A list of copies is its own container.
    assert (code(second.shadow_container), second.shadow_method) == ("clones", None)


@pytest.mark.parametrize(
    ("mapped", "old", "new", "away"),
    [
        ("lambda e, p: e + (1 - d) * (p - e)", "1 - ((1 - d))", "(1 - d)", False),
        ("lambda e, p: e - (p - e) * k", "1 - (k)", "k", True),
        ("lambda e, p: e - k * (e - p)", "1 - (k)", "k", False),
        ("blend", "d", "(1 - d)", False),
    ],
)
def test_tree_map_difference_and_named_function(
    mapped: str, old: str, new: str, away: bool
) -> None:
    ctx = context(
        "import jax\n"
        "def step(ema_params, params, d, k):\n"
        "    def blend(e, p):\n"
        "        return d * e + (1 - d) * p\n"
        f"    return jax.tree_util.tree_map({mapped}, ema_params, params)\n"
    )
    [update] = [u for u in ctx.get(InPlaceUpdates).updates if u.form == "tree_map"]
    assert code(update.shadow) == "ema_params" and code(update.source) == "params"
    assert weight(update.old_weight) == old
    assert weight(update.new_weight) == new
    assert update.away is away
