"""Equivalent decay mutants under a TF1-style warmup ramp ``min(d, (1 + n) / (10 + n))``."""

from __future__ import annotations

import pytest

from benchmarks.quality import mutation
from benchmarks.quality.operators import by_name

DECAY_OPS = ("decay-0.9", "decay-1.0", "decay-0.99999")

# 50000 * 100 // 256 = 19531 steps: the ramp stays below 19532 / 19541 = 0.99954.
FUNCTIONAL = """\
import jax.numpy as jnp


def get_config():
    batch = 256
    examples = 50000
    epochs = 100
    return dict(training_steps=examples * epochs // batch, ema_decay=0.9999)


def warm_ema(avg, new, decay, step):
    decay = jnp.minimum(decay, (1.0 + step) / (10.0 + step))
    return avg * decay + new * (1 - decay)


def train_step(config, avg, params, step):
    return warm_ema(avg, params, config["ema_decay"], step)
"""

CLASS = """\
import torch

MAX_ITERS = {steps}


class WarmEMA:
    def __init__(self, model, decay={decay}):
        self.model = model
        self.decay = decay
        self.updates = 0

    @torch.no_grad()
    def update(self, shadow):
        self.updates += 1
        d = min((1 + self.updates) / (10 + self.updates), self.decay)
        for s, p in zip(shadow, self.model.parameters()):
            s.mul_(d).add_(p, alpha=1 - d)
"""


def _descriptions(src: str, project_texts: tuple[str, ...] = ()) -> set[str]:
    errors: list = []
    ops = [by_name(o) for o in DECAY_OPS]
    out = mutation.mutants_of("t.py", src, ops, errors=errors, project_texts=project_texts)
    assert errors == []
    return {m.operator for m in out}


def test_both_values_above_the_cap_make_no_mutant() -> None:
    # 0.9999 and the mutants 1.0 and 0.99999 all exceed the cap 0.99954: min picks the ramp
    assert _descriptions(FUNCTIONAL) == {"decay-0.9"}


@pytest.mark.parametrize(
    ("steps", "decay", "made"),
    [
        # cap (1 + N) / (10 + N): 0.999982 for N = 500000, 0.999994 for N = 1500000
        (500_000, "0.999995", {"decay-0.9"}),
        (1_500_000, "0.999995", {"decay-0.9", "decay-0.99999"}),  # 0.99999 < cap
        # the original < cap matters late in the run, but 1.0 > cap never takes effect: it
        # makes no over-long horizon, only the ramp where 0.99999 was (no bug of its kind)
        (1_500_000, "0.99999", {"decay-0.9"}),
        (500_000, "0.99990", {"decay-0.9"}),  # cap 0.999982: 0.99999 and 1.0 never apply
    ],
)
def test_a_run_long_enough_for_the_ramp_to_pass_a_value_keeps_the_mutant(
    steps: int, decay: str, made: set[str]
) -> None:
    assert _descriptions(CLASS.format(steps=steps, decay=decay)) == made


def test_no_run_length_in_the_file_keeps_every_mutant() -> None:
    src = FUNCTIONAL.replace("training_steps=examples * epochs // batch, ", "")
    assert _descriptions(src) == set(DECAY_OPS)
    # a run length that does not evaluate (a parameter) is no evidence either
    src = FUNCTIONAL.replace("def get_config():", "def get_config(epochs):").replace(
        "    epochs = 100\n", ""
    )
    assert _descriptions(src) == set(DECAY_OPS)
    # a bare num_steps may count sampling steps: not a run length
    src = FUNCTIONAL.replace("training_steps=", "num_steps=")
    assert _descriptions(src) == set(DECAY_OPS)


@pytest.mark.parametrize(
    "change",
    [
        # a min without a ramp
        ("(1.0 + step) / (10.0 + step)", "0.999"),
        # a ramp that only applies on one branch
        (
            "    decay = jnp.minimum(",
            "    if step is not None:\n        decay = jnp.minimum(",
        ),
        # the configured value also read outside the ramp
        (
            "    return warm_ema(",
            '    print(config["ema_decay"])\n    return warm_ema(',
        ),
        # a second callee of that name that does not cap
        ("", "\n\nclass Other:\n    def warm_ema(self, a, b, c, d):\n        return a * c\n"),
    ],
)
def test_a_decay_not_always_capped_by_a_ramp_keeps_every_mutant(change) -> None:
    old, new = change
    src = FUNCTIONAL.replace(old, new) if old else FUNCTIONAL + new
    assert src != FUNCTIONAL
    assert _descriptions(src) == set(DECAY_OPS)


CONFIG = """\
from ml_collections import config_dict


def get_config():
    config = config_dict.ConfigDict()
    batch_size = 1024
    config.training_steps = 1000000 * 10 // batch_size
    config.experiment = dict(ema_decay=0.99995, averager={averager!r})
    return config
"""

HELPERS = """\
import jax.numpy as jnp


def warm_ema(avg, new, decay, step):
    decay = jnp.minimum(decay, (1 + step) / (10 + step))
    return avg * decay + new * (1 - decay)


def plain_ema(avg, new, decay, step):
    return avg * decay + new * (1 - decay)
"""

TRAINER = """\
import jax
import helpers


class Trainer:
    def __init__(self, config):
        self.config = config

    def train_step(self, avg, params, step):
        fn = getattr(helpers, self.config.get("averager", "warm_ema"))
        update = lambda a, p: fn(a, p, self.config.ema_decay, step)
        return jax.tree_util.tree_map(update, avg, params)
"""


def test_the_ramp_and_the_dispatch_in_other_files_of_the_project() -> None:
    # 9765 steps: cap 9766 / 9775 = 0.99908; the value reaches the ramp through
    # getattr(helpers, config.get("averager", "warm_ema")) in another module
    src = CONFIG.format(averager="warm_ema")
    assert _descriptions(src, (HELPERS, TRAINER)) == {"decay-0.9"}
    # the file configures the averager without a ramp
    assert _descriptions(CONFIG.format(averager="plain_ema"), (HELPERS, TRAINER)) == set(DECAY_OPS)
    # the ramp file alone is not enough: the reads of ema_decay are unknown
    assert _descriptions(src, (HELPERS,)) == set(DECAY_OPS)
    # the project also configures the averager without a ramp: it may run
    other = CONFIG.format(averager="plain_ema").replace("ema_decay=0.99995, ", "")
    assert _descriptions(src, (HELPERS, TRAINER, other)) == set(DECAY_OPS)
