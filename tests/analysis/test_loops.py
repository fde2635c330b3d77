"""The training-loop model, without any rule."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.training.loops import TrainingLoops


def model(source: str) -> tuple[TrainingLoops, FileContext]:
    ctx = FileContext(cst.parse_module(source), "t.py")
    return ctx.get(TrainingLoops), ctx


def call(ctx: FileContext, text: str, nth: int = 0) -> cst.Call:
    found = [c for c in ctx.nodes(cst.Call) if ctx.module.code_for_node(c) == text]
    assert found, text
    return found[nth]


ACCUMULATION = """
def train(model, loader, optimizer, ema, accum_steps):
    for epoch in range(10):
        for i, (x, y) in enumerate(loader):
            loss = model(x).sum() / accum_steps
            loss.backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
                ema.update(model)
            ema.update_parameters(model)
"""


def test_update_outside_the_accumulation_guard_runs_per_micro_batch() -> None:
    loops, ctx = model(ACCUMULATION)
    assert len(loops.train_loops) == 2  # the epoch loop trains too
    assert len(loops.step_loops) == 1
    outside = loops.runs_per_micro_batch(call(ctx, "ema.update_parameters(model)"))
    assert outside is not None and outside.kind == "guard"
    assert loops.runs_per_micro_batch(call(ctx, "ema.update(model)")) is None


def test_loop_structure_queries() -> None:
    loops, ctx = model(ACCUMULATION)
    [inner] = loops.step_loops
    outer = loops.epoch_loop(inner)
    assert isinstance(outer, cst.For) and outer is not inner
    iterable = loops.loop_iterable(inner)
    assert isinstance(iterable, cst.Name) and iterable.value == "loader"
    [step] = loops.step_anchors(inner)
    assert ctx.module.code_for_node(step) == "optimizer.step()"


def test_no_accumulation_means_no_finding() -> None:
    loops, ctx = model(
        "def train(model, loader, opt, ema):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        opt.step()\n"
        "        ema.update(model)\n"
    )
    assert loops.runs_per_micro_batch(call(ctx, "ema.update(model)")) is None


SPLIT = """
class Trainer:
    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        if self.ema:
            self.ema.update(self.model)

    def train_one_epoch(self, loader):
        for i, batch in enumerate(loader):
            loss = self.model(batch)
            self.scaler.scale(loss).backward()
            if i - self.last_opt_step >= self.accumulate:
                self.optimizer_step()
                self.last_opt_step = i
            self.log_ema()

    def log_ema(self):
        self.ema.update(self.model)
"""


def test_steps_split_across_methods() -> None:
    loops, ctx = model(SPLIT)
    assert len(loops.train_loops) == 1
    inside_helper = call(ctx, "self.ema.update(self.model)", 0)
    through_other_method = call(ctx, "self.ema.update(self.model)", 1)
    assert loops.runs_per_micro_batch(inside_helper) is None
    finding = loops.runs_per_micro_batch(through_other_method)
    assert finding is not None and finding.kind == "guard"
    assert ctx.module.code_for_node(finding.anchor.node) == "self.log_ema()"


ACCELERATE = """
def train(accelerator, model, loader, optimizer, ema_unet, ema_vae):
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(batch)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            ema_vae.step(model.parameters())
        if accelerator.sync_gradients:
            ema_unet.step(model.parameters())
"""


def test_accelerate_accumulate_needs_sync_gradients() -> None:
    loops, ctx = model(ACCELERATE)
    bad = loops.runs_per_micro_batch(call(ctx, "ema_vae.step(model.parameters())"))
    assert bad is not None and bad.kind == "accumulate"
    assert loops.runs_per_micro_batch(call(ctx, "ema_unet.step(model.parameters())")) is None


def test_ema_step_is_not_an_optimizer_step() -> None:
    loops, ctx = model(ACCELERATE)
    assert not loops.is_step_call(call(ctx, "ema_unet.step(model.parameters())"))
    assert loops.is_step_call(call(ctx, "optimizer.step()"))


TOOK_STEP = """
class TrainLoop:
    def run_loop(self):
        while True:
            batch = next(self.data)
            self.forward_backward(batch)
            took_step = self.optimize()
            if took_step:
                self._update_ema()

    def forward_backward(self, batch):
        for micro in batch:
            loss = self.model(micro)
            loss.backward()

    def optimize(self):
        return self.mp_trainer.optimizer_step(self.opt)

    def _update_ema(self):
        for rate, params in zip(self.ema_rate, self.ema_params):
            update_ema(params, self.master_params, rate=rate)
"""


def test_took_step_guard_and_micro_batches_in_a_helper() -> None:
    loops, ctx = model(TOOK_STEP.replace("self.mp_trainer.optimizer_step", "self.opt.step"))
    assert len(loops.train_loops) == 1
    update = call(ctx, "update_ema(params, self.master_params, rate=rate)")
    assert loops.runs_per_micro_batch(update) is None


def test_inner_micro_batch_loop() -> None:
    loops, ctx = model(
        "def train(model, loader, opt, ema):\n"
        "    for batch in loader:\n"
        "        for micro in batch.split(4):\n"
        "            model(micro).sum().backward()\n"
        "            ema.update(model)\n"
        "        opt.step()\n"
    )
    finding = loops.runs_per_micro_batch(call(ctx, "ema.update(model)"))
    assert finding is not None and finding.kind == "loop"


def test_non_accumulation_branches_are_not_guards() -> None:
    loops, ctx = model(
        "def train(model, loader, optimizer, scaler, ema):\n"
        "    for x in loader:\n"
        "        loss = model(x)\n"
        "        loss.backward()\n"
        "        if scaler is not None:\n"
        "            scaler.step(optimizer)\n"
        "        else:\n"
        "            optimizer.step()\n"
        "        ema.update(model)\n"
    )
    assert loops.runs_per_micro_batch(call(ctx, "ema.update(model)")) is None


def test_not_a_training_loop_without_backward() -> None:
    loops, _ = model("for x in loader:\n    optimizer.step()\n")
    assert loops.train_loops == []


VALIDATION = """
import torch
from torch import no_grad as ng


def evaluate(net, loader):
    return sum(net(x) for x in loader)


def run(model, ema, train_loader, val_loader):
    for x in val_loader:
        ema(x)
    with torch.no_grad():
        ema(1)
    with ng():
        ema(2)
    with torch.set_grad_enabled(True):
        ema(3)
    ema(4)


@torch.inference_mode()
def predict_all(net):
    net(5)
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("net(x)", True),
        ("ema(x)", True),
        ("ema(1)", True),
        ("ema(2)", True),
        ("ema(3)", False),
        ("ema(4)", False),
        ("net(5)", True),
    ],
)
def test_validation_contexts(text: str, expected: bool) -> None:
    loops, ctx = model(VALIDATION)
    assert loops.is_validation_context(call(ctx, text)) is expected


def test_validation_function_names() -> None:
    loops, _ = model(
        "def validate(m): pass\ndef evaluate_ema(m): pass\ndef run_eval(m): pass\n"
        "def test_something(): pass\ndef train(m): pass\ndef latest(m): pass\n"
    )
    names = {fn.name.value for fn in loops.functions if loops.is_validation_function(fn)}
    assert names == {"validate", "evaluate_ema", "run_eval"}


# Placement: before the step, and planning a move -------------------------------------------
from ema_lint.analysis.training.loops import Placement, accumulation_steps  # noqa: E402


def test_update_before_step_in_the_loop_and_in_a_step_helper() -> None:
    loops, ctx = model(
        "class T:\n"
        "    def optimizer_step(self):\n"
        "        self.ema.update(self.model)\n"
        "        self.opt.step()\n"
        "    def fit(self, loader, opt, ema):\n"
        "        for x in loader:\n"
        "            ema.update(self.model)\n"
        "            self.model(x).sum().backward()\n"
        "            self.optimizer_step()\n"
        "            ema.update_parameters(self.model)\n"
    )
    placement = Placement(loops)
    in_helper = placement.before_step(call(ctx, "self.ema.update(self.model)"))
    assert in_helper is not None and ctx.code(in_helper.step) == "self.opt.step()"
    assert in_helper.loop is None and in_helper.function.name.value == "optimizer_step"
    at_top = placement.before_step(call(ctx, "ema.update(self.model)"))
    assert at_top is not None and ctx.code(at_top.step) == "self.optimizer_step()"
    assert placement.before_step(call(ctx, "ema.update_parameters(self.model)")) is None


def test_a_step_in_an_inner_loop_is_not_the_same_iteration() -> None:
    loops, ctx = model(
        "def fit(loader, opt, swa, model):\n"
        "    for epoch in range(3):\n"
        "        swa.update_parameters(model)\n"
        "        for x in loader:\n"
        "            model(x).sum().backward()\n"
        "            opt.step()\n"
    )
    assert Placement(loops).before_step(call(ctx, "swa.update_parameters(model)")) is None


def test_movable_statement_climbs_only_through_blocks_that_hold_the_update() -> None:
    loops, ctx = model(
        "import torch\n"
        "def fit(loader, opt, ema, model, log):\n"
        "    for i, x in enumerate(loader):\n"
        "        model(x).sum().backward()\n"
        "        if (i + 1) % 4 == 0:\n"
        "            opt.step()\n"
        "        if ema is not None:\n"
        "            with torch.no_grad():\n"
        "                ema.update(model)\n"
        "        if log:\n"
        "            ema.update_parameters(model)\n"
        "            print(i)\n"
    )
    placement = Placement(loops)
    [loop] = loops.step_loops
    update = call(ctx, "ema.update(model)")
    moved = placement.movable(update, {id(update)}, within=loop)
    assert isinstance(moved, cst.If) and ctx.code(moved.test) == "ema is not None"
    other = call(ctx, "ema.update_parameters(model)")
    assert placement.movable(other, {id(other)}, within=loop) is None  # would leave `if log:`
    target = placement.after_step(call(ctx, "opt.step()"), loop)
    assert ctx.code(target).strip() == "opt.step()"
    assert not placement.conflicts(moved, target, ["ema"])


def test_conditional_step_keeps_the_update_inside_and_if_else_goes_after() -> None:
    loops, ctx = model(
        "def fit(loader, opt, scaler, ema, model, use_amp):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        if use_amp:\n"
        "            scaler.step(opt)\n"
        "        else:\n"
        "            opt.step()\n"
        "        if x.valid:\n"
        "            opt.step()\n"
    )
    placement = Placement(loops)
    [loop] = loops.step_loops
    both = placement.after_step(call(ctx, "scaler.step(opt)"), loop)
    assert isinstance(both, cst.If) and ctx.code(both.test) == "use_amp"
    conditional = placement.after_step(call(ctx, "opt.step()", 1), loop)
    assert ctx.code(conditional).strip() == "opt.step()"


def test_move_conflicts_with_reads_of_the_object_and_writes_of_its_inputs() -> None:
    loops, ctx = model(
        "def fit(loader, opt, ema, model, log):\n"
        "    for i, x in enumerate(loader):\n"
        "        model(x).sum().backward()\n"
        "        if (i + 1) % 4 == 0:\n"
        "            opt.step()\n"
        "        decay = 0.999\n"
        "        ema.update(model, decay)\n"
    )
    placement = Placement(loops)
    [loop] = loops.step_loops
    update = call(ctx, "ema.update(model, decay)")
    moved = placement.movable(update, {id(update)}, within=loop)
    target = placement.after_step(call(ctx, "opt.step()"), loop)
    assert placement.conflicts(moved, target, ["ema"])  # decay is assigned in between


def test_accumulation_steps_from_the_guard_the_accelerator_and_range() -> None:
    loops, ctx = model(ACCUMULATION.replace("accum_steps):", "accum_steps=4):"))
    finding = loops.runs_per_micro_batch(call(ctx, "ema.update_parameters(model)"))
    assert accumulation_steps(ctx, finding) == (4, "accum_steps")
    loops, ctx = model(
        "from accelerate import Accelerator\nA = Accelerator(gradient_accumulation_steps=8)\n"
        + ACCELERATE
    )
    finding = loops.runs_per_micro_batch(call(ctx, "ema_vae.step(model.parameters())"))
    assert accumulation_steps(ctx, finding) == (8, "8")
    loops, ctx = model(
        "def train(model, loader, opt, ema):\n"
        "    for batch in loader:\n"
        "        for k in range(4):\n"
        "            model(batch[k]).sum().backward()\n"
        "            ema.update(model)\n"
        "        opt.step()\n"
    )
    finding = loops.runs_per_micro_batch(call(ctx, "ema.update(model)"))
    assert accumulation_steps(ctx, finding) == (4, "4")
    assert (
        Placement(loops)
        .accumulate_owner(cst.parse_statement("with acc.accumulate(m):\n    pass\n"))
        .value
        == "acc"
    )


def test_comprehension_over_a_validation_loader_is_a_validation_context() -> None:
    loops, ctx = model(
        "outs = [ema(x) for x in val_loader]\nother = [ema(y) for y in train_loader]\n"
    )
    assert loops.is_validation_context(call(ctx, "ema(x)"))
    assert not loops.is_validation_context(call(ctx, "ema(y)"))


# Shapes of real training loops ------------------------------------------------------------


def test_an_update_inside_a_helper_that_steps_under_a_guard_runs_per_micro_batch() -> None:
    loops, ctx = model(
        "def main(model, loader, optimizer, ema, k):\n"
        "    def run_iter(step, batch):\n"
        "        model(batch).mean().backward()\n"
        "        if (step + 1) % k == 0:\n"
        "            optimizer.step()\n"
        "        ema.update(model)\n"
        "    for step, batch in enumerate(loader):\n"
        "        run_iter(step, batch)\n"
    )
    found = loops.runs_per_micro_batch(call(ctx, "ema.update(model)"))
    assert found is not None and found.kind == "guard"
    assert ctx.code(found.at) == "ema.update(model)"
    assert isinstance(found.scope, cst.FunctionDef) and found.scope.name.value == "run_iter"


def test_early_exits_guard_what_follows_them() -> None:
    loops, ctx = model(
        "def train(model, loader, optimizer, ema, k):\n"
        "    for i, batch in enumerate(loader):\n"
        "        if batch is None:\n"
        "            continue\n"
        "        model(batch).mean().backward()\n"
        "        ema.update(model)\n"
        "        if (i + 1) % k != 0:\n"
        "            continue\n"
        "        optimizer.step()\n"
        "        ema.update_parameters(model)\n"
    )
    [loop] = loops.step_loops
    before, after = call(ctx, "ema.update(model)"), call(ctx, "ema.update_parameters(model)")
    exit_guard = loops.early_exit(after, loop)
    assert exit_guard is not None and "% k" in ctx.code(exit_guard.test)
    assert loops.early_exit(before, loop) is None  # `if batch is None: continue` is no guard
    found = loops.runs_per_micro_batch(before)
    assert found is not None and found.kind == "guard" and found.where is exit_guard
    assert loops.runs_per_micro_batch(after) is None


def test_branches_are_exclusive_and_small_loops_are_part_of_the_iteration() -> None:
    loops, ctx = model(
        "def train(model, loader, opt, ema_p, warmup):\n"
        "    for i, batch in enumerate(loader):\n"
        "        if i < warmup:\n"
        "            ema.update(model)\n"
        "        else:\n"
        "            model(batch).mean().backward()\n"
        "            for p_ema, p in zip(ema_p, model.parameters()):\n"
        "                p_ema.mul_(0.99)\n"
        "            opt.step()\n"
    )
    update, step = call(ctx, "ema.update(model)"), call(ctx, "opt.step()")
    assert loops.exclusive(update, step) and loops.exclusive(step, update)
    small = call(ctx, "p_ema.mul_(0.99)")
    assert not loops.exclusive(small, step)
    [loop] = loops.step_loops
    assert loops.iteration_loop(small, loops.function_of(small)) is loop


def test_step_summaries_of_helpers_and_gated_calls() -> None:
    loops, ctx = model(
        "import deepspeed\n"
        "config = {'gradient_accumulation_steps': 4}\n"
        "def step_every(opt):\n"
        "    opt.step()\n"
        "def step_some(opt, i, k):\n"
        "    if (i + 1) % k == 0:\n"
        "        opt.step()\n"
        "class Stepper:\n"
        "    def step(self, i):\n"
        "        if not self.should_step(i):\n"
        "            return\n"
        "        self.optimizer.step()\n"
        "def train(model, loader, optimizer, loss_scaler, model_engine, k):\n"
        "    stepper = Stepper()\n"
        "    for i, batch in enumerate(loader):\n"
        "        step_every(optimizer)\n"
        "        step_some(optimizer, i, k)\n"
        "        stepper.step(i)\n"
        "        loss_scaler(batch, optimizer, update_grad=(i + 1) % k == 0)\n"
        "        loss_scaler(batch, optimizer, update_grad=True)\n"
        "        model_engine.step()\n"
    )
    every = loops.summary(call(ctx, "step_every(optimizer)"))
    assert every.steps and every.gate is None
    some = loops.summary(call(ctx, "step_some(optimizer, i, k)"))
    assert some.steps and some.gate is not None and some.gate[0] == "helper"
    method = loops.summary(call(ctx, "stepper.step(i)"))  # a method of an instance
    assert method.steps and method.gate is not None and method.gate[0] == "helper"
    scaler = loops.summary(call(ctx, "loss_scaler(batch, optimizer, update_grad=(i + 1) % k == 0)"))
    assert scaler.steps and scaler.backpropagates and scaler.gate[0] == "keyword"
    assert loops.summary(call(ctx, "loss_scaler(batch, optimizer, update_grad=True)")).gate is None
    engine = loops.summary(call(ctx, "model_engine.step()"))
    assert engine.steps and engine.gate[0] == "engine"


def test_summaries_of_other_files_functions_can_be_supplied() -> None:
    from ema_lint.analysis.training.loops import StepSummary

    source = (
        "from .engine import train_one_step\n"
        "def train(model, loader, ema, k):\n"
        "    for i, batch in enumerate(loader):\n"
        "        train_one_step(model, batch, i)\n"
        "        ema.update(model)\n"
    )
    ctx = FileContext(cst.parse_module(source), "t.py")
    assert TrainingLoops(ctx).train_loops == []
    step_call = call(ctx, "train_one_step(model, batch, i)")
    gate = step_call.args[2]

    def summaries(node: cst.Call) -> StepSummary | None:
        if node is step_call:
            return StepSummary(steps=True, backpropagates=True, gate=("helper", gate))
        return None

    loops = TrainingLoops(ctx, summaries)
    assert len(loops.train_loops) == 1
    found = loops.runs_per_micro_batch(call(ctx, "ema.update(model)"))
    assert found is not None and found.kind == "helper"


def test_each_path_to_an_update_in_a_helper_is_judged() -> None:
    """A helper holding the update, called from two loops before their steps: one answer
    per call. A call running a whole training loop is not the step of an iteration."""
    loops, ctx = model(
        "def blend(avg, online, decay):\n"
        "    avg.weight.mul_(decay).add_(online.weight, alpha=1 - decay)\n"
        "def fit(loader, opt, model, avg):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        blend(avg, model, 0.99)\n"
        "        opt.step()\n"
        "def tune(loader, opt, model, avg):\n"
        "    for x in loader:\n"
        "        model(x).sum().backward()\n"
        "        blend(avg, model, 0.9)\n"
        "        opt.step()\n"
        "def main(loader, opt, model, avg):\n"
        "    blend(avg, model, 0)\n"
        "    fit(loader, opt, model, avg)\n"
    )
    update = call(ctx, "avg.weight.mul_(decay).add_(online.weight, alpha=1 - decay)")
    found = Placement(loops).before_steps(update)
    assert [ctx.code(f.node) for f in found] == [
        "blend(avg, model, 0.99)",
        "blend(avg, model, 0.9)",
    ]
    assert loops.runs_training_loop(call(ctx, "fit(loader, opt, model, avg)"))
    assert Placement(loops).before_step(call(ctx, "blend(avg, model, 0)")) is None


def test_the_base_optimizer_step_of_a_lightning_override_steps_and_backpropagates() -> None:
    loops, ctx = model(
        "class M(LightningModule):\n"
        "    def optimizer_step(self, epoch, batch_idx, optimizer, closure=None):\n"
        "        self.ema.update(self.net)\n"
        "        super().optimizer_step(epoch, batch_idx, optimizer, closure)\n"
        "    def other(self):\n"
        "        super().optimizer_step()\n"
    )
    step = call(ctx, "super().optimizer_step(epoch, batch_idx, optimizer, closure)")
    assert loops.is_step_call(step) and loops.is_backward_call(step)
    assert not loops.is_step_call(call(ctx, "super().optimizer_step()"))
    found = Placement(loops).before_step(call(ctx, "self.ema.update(self.net)"))
    assert found is not None and found.step is step
