"""Batch loops run by a loop: loader, batch shape and device, without any rule."""

from __future__ import annotations

import libcst as cst

from ema_lint.analysis.syntax.origins import Origins
from ema_lint.analysis.training.batches import BatchLoops, BatchShape
from tests.analysis.helpers import context

SPLIT = """
def train_one_epoch(model, loader, optimizer, device):
    model.train()
    for step, (images, target) in enumerate(tqdm(loader)):
        images = images.to(device, non_blocking=True)
        loss = criterion(model(images), target)
        loss.backward()
        optimizer.step()


def evaluate(model, val_loader):
    for images, _ in val_loader:
        model(images)


def main(args):
    train_loader = make(args)
    device = torch.device("cuda")
    for epoch in range(args.epochs):
        train_one_epoch(model, train_loader, optimizer, device)
        evaluate(model, val_loader)
        swa_model.update_parameters(model)
"""


def _outer(ctx):
    return next(f for f in ctx.nodes(cst.For) if ctx.code(f.iter) == "range(args.epochs)")


def test_batch_loop_through_a_call_with_loader_and_device() -> None:
    ctx = context(SPLIT)
    [found] = ctx.get(BatchLoops).run_by(_outer(ctx))
    assert ctx.code(found.loader) == "loader" and found.loaders == 1
    assert found.shape is BatchShape.SEQUENCE
    origins = ctx.get(Origins)
    assert ctx.code(origins.lift_through(found.loader, found.chain)) == "train_loader"
    assert ctx.code(origins.lift_through(found.device, found.chain)) == "device"


def test_nested_loop_single_tensor_and_cuda() -> None:
    ctx = context(
        "for epoch in range(10):\n"
        "    for x in loader:\n"
        "        x = x.cuda()\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
    )
    [found] = ctx.get(BatchLoops).run_by(ctx.nodes(cst.For)[0])
    assert found.shape is BatchShape.SINGLE and found.cuda and found.device is None
    assert found.chain == ()


def test_mapping_batches_and_zipped_loaders() -> None:
    ctx = context(
        "for epoch in range(10):\n"
        "    for batch in loader:\n"
        "        batch = {k: v.to(device) for k, v in batch.items()}\n"
        "        model(**batch).loss.backward()\n"
        "        opt.step()\n"
        "    for (x, y), (u, _) in zip(labeled, unlabeled):\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
    )
    first, second = ctx.get(BatchLoops).run_by(ctx.nodes(cst.For)[0])
    assert first.shape is BatchShape.MAPPING
    assert second.loaders == 2 and ctx.code(second.loader) == "labeled"


def test_a_batch_loop_runs_itself() -> None:
    ctx = context(
        "for i, (x, y) in enumerate(train_loader):\n"
        "    x, y = x.to(dev), y.to(dev)\n"
        "    model(x).sum().backward()\n"
        "    opt.step()\n"
    )
    [found] = ctx.get(BatchLoops).run_by(ctx.nodes(cst.For)[0])
    assert ctx.code(found.loader) == "train_loader" and ctx.code(found.device) == "dev"
