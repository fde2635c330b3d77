"""The fixes of the hand-written update rules (EMA301-EMA304), run with torch.

Each buggy update is fixed by the engine, the fixed code is executed on a small model whose
weights and BatchNorm statistics change at every step, and the averaged copy is compared
with an EMA computed independently from the live weights. The fixture cases' own expected
outputs are executed the same way. Skipped where torch is not installed.
"""

from __future__ import annotations

import copy
import sys
import textwrap
import types
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from ema_lint import engine
from ema_lint.config import Overrides, Settings

torch = pytest.importorskip("torch")
nn = torch.nn

FIXTURES = Path(__file__).resolve().parent.parent.parent / "fixtures"
DECAY = 0.9
STEPS = 4


# Helpers ---------------------------------------------------------------------------------------
def fixed(source: str, code: str, *, unsafe: bool = False) -> str:
    """``source`` after ``--fix`` (and ``--unsafe-fixes``), checking ``code`` found it."""
    source = textwrap.dedent(source)
    settings = Settings(Overrides(unsafe_fixes=unsafe), isolated=True).for_file(None)
    found = {d.code for d in engine.lint(source, "snippet.py", settings)}
    assert code in found, f"{code} does not report the snippet (found {found})"
    outcome = engine.fix(source, "snippet.py", settings)
    assert outcome.changed
    left = {d.code for d in outcome.diagnostics}
    assert code not in left, outcome.fixed
    return str(outcome.fixed)


def load(text: str, name: str = "snippet") -> dict:
    namespace: dict = {"__name__": name}
    exec(compile(text, name, "exec"), namespace)
    return namespace


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))


def train_step(model: nn.Module) -> None:
    """A forward/backward in train mode (BatchNorm statistics move) and a weight change."""
    model.train()
    model(torch.randn(8, 3)).square().mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
            p.grad = None


def run(
    update: Callable[[nn.Module], None],
    shadow: Callable[[], list],
    model: nn.Module,
    decay: float = DECAY,
) -> tuple[list, list]:
    """Train, update, and return the shadow and the reference EMA of the parameters."""
    reference = [p.detach().clone() for p in model.parameters()]
    for _ in range(STEPS):
        train_step(model)
        update(model)
        for r, p in zip(reference, model.parameters(), strict=True):
            r.mul_(decay).add_(p.detach(), alpha=1 - decay)
    return shadow(), reference


def assert_average(shadow: list, reference: list) -> None:
    assert len(shadow) == len(reference)
    for s, r in zip(shadow, reference, strict=True):
        assert s.grad_fn is None, "the average joined the autograd graph"
        torch.testing.assert_close(s.detach(), r, rtol=1e-5, atol=1e-6)


def params(module: nn.Module) -> Callable[[], list]:
    return lambda: list(module.parameters())


# Dedicated snippets: each fix on a function `update(ema, model, decay)` ---------------------------
CALLER = """

def train(ema, model, loader, optimizer):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        update(ema, model, 0.9)
"""

SNIPPETS = {
    "EMA301 loop variable": (
        "EMA301",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e = decay * e + (1 - decay) * p
        """,
    ),
    "EMA301 lerp rebinding": (
        "EMA301",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for (_, e), (_, p) in zip(ema.named_parameters(), model.named_parameters()):
                e = e.lerp(p, 1 - decay)
        """,
    ),
    "EMA301 state_dict entry": (
        "EMA301",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            sd = ema.state_dict()
            for k, v in model.named_parameters():
                sd[k] = decay * sd[k] + (1 - decay) * v
        """,
    ),
    "EMA301 then EMA303 outside no_grad": (
        "EMA301",
        """
        from torch import nn

        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                new = decay * e + (1 - decay) * p
                e = new
        """,
    ),
    "EMA302 mul_ add_": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(1 - decay).add_(p, alpha=decay)
        """,
    ),
    "EMA302 legacy add_ in two statements": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(1.0 - decay)
                e.add_(decay, p)
        """,
    ),
    "EMA302 lerp_ weight": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.lerp_(p, decay)
        """,
    ),
    "EMA302 EDM lerp": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for p_ema, p_net in zip(ema.parameters(), model.parameters()):
                p_ema.copy_(p_net.detach().lerp(p_ema, 1 - decay))
        """,
    ),
    "EMA302 copy_ of a combination": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.copy_((1 - decay) * e + decay * p)
        """,
    ),
    "EMA302 .data assignment": (
        "EMA302",
        """
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.data = (1 - decay) * e.data + decay * p.data
        """,
    ),
    "EMA302 foreach": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            ema_params = list(ema.parameters())
            params = list(model.parameters())
            torch._foreach_mul_(ema_params, 1 - decay)
            torch._foreach_add_(ema_params, params, alpha=decay)
        """,
    ),
    "EMA302 foreach lerp": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), decay)
        """,
    ),
    "EMA302 augmented assignment": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e -= decay * (e - p)
        """,
    ),
    "EMA302 sign slip": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.add_((e - p) * (1 - decay))
        """,
    ),
    "EMA302 sign slip in sub_": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.sub_((p - e) * (1 - decay))
        """,
    ),
    "EMA303 frozen copy, torch imported as th": (
        "EMA303",
        """
        import torch as th

        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p, alpha=1 - decay)
        """,
    ),
    "EMA303 foreach, no torch import": (
        "EMA303",
        """
        from torch import nn

        def update(ema, model, decay):
            ema_params = list(ema.parameters())
            params = list(model.parameters())
            torch._foreach_mul_(ema_params, decay)
            torch._foreach_add_(ema_params, params, alpha=1 - decay)
        """,
    ),
    "EMA302 sign slip in an augmented assignment": (
        "EMA302",
        """
        import torch

        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e += (1 - decay) * (e - p)
        """,
    ),
}


@pytest.mark.filterwarnings("ignore:This overload of add_ is deprecated")  # legacy add_
@pytest.mark.parametrize("case", sorted(SNIPPETS))
def test_fixed_snippet_averages(case: str) -> None:
    code, source = SNIPPETS[case]
    source = textwrap.dedent(source) + CALLER
    namespace = load(fixed(source, code))
    model = make_model()
    ema = copy.deepcopy(model).requires_grad_(False)
    shadow, reference = run(lambda m: namespace["update"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)


def test_copy_that_requires_grad_raises_before_and_averages_after_the_fix() -> None:
    source = textwrap.dedent(
        """
        import copy

        import torch

        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p.detach(), alpha=1 - decay)

        def train(model, loader, optimizer):
            ema_model = copy.deepcopy(model)  # its parameters still require grad
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                update(ema_model, model, 0.9)
        """
    )
    model = make_model()
    with pytest.raises(RuntimeError, match="in-place"):
        load(source)["update"](copy.deepcopy(model), model, DECAY)
    namespace = load(fixed(source, "EMA303"))
    ema = copy.deepcopy(model)
    shadow, reference = run(lambda m: namespace["update"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)


def test_buffers_fix_keeps_batchnorm_statistics_current() -> None:
    source = textwrap.dedent(
        """
        import copy

        import torch
        from torch import nn


        @torch.no_grad()
        def update(ema, model, decay):
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p, alpha=1 - decay)


        def train(model, loader, optimizer):
            ema = copy.deepcopy(model)
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
                update(ema, model, 0.9)
            evaluate(ema)


        layer = nn.BatchNorm1d(4)
        """
    )
    namespace = load(fixed(source, "EMA304", unsafe=True))
    model = make_model()
    ema = copy.deepcopy(model)
    shadow, reference = run(lambda m: namespace["update"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)
    for b_ema, b in zip(ema.buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(b_ema, b)
    # Without the fix the statistics are still the initial ones.
    stale = copy.deepcopy(make_model())
    load(source)["update"](stale, model, DECAY)
    assert not torch.allclose(stale[1].running_var, model[1].running_var)


# The fixture cases' expected outputs, executed ------------------------------------------------
def fixture(path: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A fixture's expected output as a module; libraries absent here are stubbed."""
    lightning = types.ModuleType("lightning")
    lightning.LightningModule = nn.Module  # type: ignore[attr-defined]
    timm = types.ModuleType("timm")
    timm.create_model = lambda *args, **kwargs: make_model()  # type: ignore[attr-defined]
    torchvision = types.ModuleType("torchvision")
    models = types.ModuleType("torchvision.models")
    models.resnet18 = lambda **kwargs: make_model()  # type: ignore[attr-defined]
    torchvision.models = models  # type: ignore[attr-defined]
    for name, module in (
        ("lightning", lightning),
        ("timm", timm),
        ("torchvision", torchvision),
        ("torchvision.models", models),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    return load((FIXTURES / path).read_text(encoding="utf-8"), path)


def test_ema301_fixed_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = fixture("EMA301/functions.fixed.py", monkeypatch)
    calls = {
        "update_ema": (DECAY, lambda ema, m: ns["update_ema"](ema, m, DECAY)),
        "update_named": (0.9999, lambda ema, m: ns["update_named"](ema, m)),  # its default
        "update_state": (DECAY, lambda ema, m: ns["update_state"](ema, m, DECAY)),
        "update_unguarded": (DECAY, lambda ema, m: ns["update_unguarded"](ema, m, DECAY)),
    }
    for decay, call in calls.values():
        model = make_model()
        ema = copy.deepcopy(model).requires_grad_(False)
        shadow, reference = run(partial(call, ema), params(ema), model, decay)
        assert_average(shadow, reference)


def test_ema301_fixed_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = fixture("EMA301/classes.fixed.py", monkeypatch)
    model = make_model()
    ema = ns["ModelEMA"](model, decay=DECAY)
    shadow, reference = run(ema.update, params(ema.ema), model)
    assert_average(shadow, reference)

    model = make_model()
    state = ns["StateEMA"](model, beta=DECAY)
    shadow, reference = run(lambda m: state.step(), params(state.ema_model), model)
    assert_average(shadow, reference)

    moco = ns["MoCo"](make_model, m=DECAY)  # two identical encoders
    shadow, reference = run(
        lambda m: moco._momentum_update_key_encoder(), params(moco.encoder_k), moco.encoder_q
    )
    assert_average(shadow, reference)


@pytest.mark.filterwarnings("ignore:This overload of add_ is deprecated")  # legacy add_
def test_ema302_fixed_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = fixture("EMA302/functions.fixed.py", monkeypatch)
    model = make_model()
    ema = copy.deepcopy(model).requires_grad_(False)
    shadow, reference = run(lambda m: ns["update_ema"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)

    model = make_model()
    ema = copy.deepcopy(model)
    shadow, reference = run(lambda m: ns["update_state"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)

    model = make_model()
    edm = ns["EMA"](model, beta=DECAY)
    shadow, reference = run(edm.update, params(edm.ema_model), model)
    assert_average(shadow, reference)

    model = make_model()
    shadow_ema = ns["Shadow"](model, decay=DECAY)
    shadow, reference = run(
        lambda m: shadow_ema.update(), lambda: list(shadow_ema.shadow.values()), model
    )
    assert_average(shadow, reference)


def test_ema303_fixed_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = fixture("EMA303/functions.fixed.py", monkeypatch)
    model = make_model()
    ema = copy.deepcopy(model).requires_grad_(False)
    shadow, reference = run(lambda m: ns["update_ema"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)

    model = make_model()
    dict_ema = ns["EMA"](model, decay=DECAY)
    shadow, reference = run(
        lambda m: dict_ema.update(), lambda: list(dict_ema.shadow.values()), model
    )
    assert_average(shadow, reference)

    model = make_model()
    model_ema = ns["ModelEMA"](model, decay=DECAY)
    shadow, reference = run(model_ema.update, params(model_ema.module), model)
    assert_average(shadow, reference)

    moco = ns["MoCo"](make_model(), m=DECAY)
    shadow, reference = run(
        lambda m: moco._momentum_update_key_encoder(), params(moco.encoder_k), moco.encoder_q
    )
    assert_average(shadow, reference)

    lit = ns["LitModel"](make_model())
    shadow, reference = run(
        lambda m: lit.on_train_batch_end(None, None, 0), params(lit.ema_net), lit.net, 0.999
    )
    assert_average(shadow, reference)


def test_ema304_unsafe_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = fixture("EMA304/functions.unsafe.py", monkeypatch)
    model = make_model()
    ema = copy.deepcopy(model)
    shadow, reference = run(lambda m: ns["update_ema"](ema, m, DECAY), params(ema), model)
    assert_average(shadow, reference)
    for b_ema, b in zip(ema.buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(b_ema, b)

    model = make_model()
    model_ema = ns["ModelEMA"](model, decay=DECAY)
    shadow, reference = run(model_ema.update, params(model_ema.ema), model)
    assert_average(shadow, reference)
    for b_ema, b in zip(model_ema.ema.buffers(), model.buffers(), strict=True):
        torch.testing.assert_close(b_ema, b)
