"""Where averaged copies are evaluated, without any rule."""

from __future__ import annotations

from ema_lint.analysis.training.evaluation import EvaluationSites
from tests.analysis.helpers import context

SOURCE = '''
import copy
import torch
from trainlib import evaluate


def run_ema(net, loader):
    """Runs the average."""
    with torch.no_grad():
        return [net(x) for x in loader]


def run_any(net, loader):
    with torch.no_grad():
        return [net(x) for x in loader]


def sets_its_own_mode(net, loader):
    net.eval()
    with torch.no_grad():
        return [net(x) for x in loader]


def fit(model, loader, val_loader, trainer):
    ema = copy.deepcopy(model)
    teacher = copy.deepcopy(model)
    for epoch in range(3):
        loss = torch.nn.functional.mse_loss(model(loader), teacher(loader))
        loss.backward()
        acc = evaluate(ema, val_loader)
        run_ema(ema, val_loader)
        run_any(ema, val_loader)
        run_any(model, val_loader)
        sets_its_own_mode(ema, val_loader)
        trainer.validate(ema)
        with torch.no_grad():
            for x in val_loader:
                ema(x)
        ema(loader)
'''


def test_evaluations_and_where_the_switch_goes() -> None:
    ctx = context(SOURCE)
    sites = ctx.get(EvaluationSites)
    found = {(ctx.code(e.node), e.kind): e for e in sites.evaluations}
    # The imported evaluate() is not judged: its body is not in the file.
    assert set(found) == {
        ("run_ema(ema, val_loader)", "passed"),
        ("run_any(ema, val_loader)", "passed"),
        ("ema(x)", "called"),
    }
    passed = found[("run_any(ema, val_loader)", "passed")]
    assert ctx.code(passed.before).strip() == "run_any(ema, val_loader)"
    assert found[("run_ema(ema, val_loader)", "passed")].top_of.name.value == "run_ema"
    assert found[("run_any(ema, val_loader)", "passed")].top_of is None  # also given model
    called = found[("ema(x)", "called")]
    assert ctx.code(called.before).startswith("with torch.no_grad():")
