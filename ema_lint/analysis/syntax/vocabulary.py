"""The words that name an average, and the test of a name against them.

The analysis decides from names whether a hand-made copy is averaged (``ema_model``,
``encoder_k``, ``target_net``) and whether a hand-written update averages (``soft_update``,
``self.shadow``); the pre-filter must admit every file where that can hold. Both use this
module, which imports nothing heavy, so the pre-filter can test a file's identifiers with the
very functions the analysis uses: sound by construction, and cheap on files that only run
the filter.
"""

from __future__ import annotations

import re

from ema_lint.prefilter import names

# Word tokens of an identifier that name an average (``ema_model``, ``modelEMA``,
# ``self.shadow``, ``polyak_update``, ``teacher``), and compound spellings that name one in
# teacher and target-network code (``_momentum_update_key_encoder``, ``soft_update``,
# ``target_net``). A hand-written update not made by an averaging API must be named so (its
# shadow, the function or the class that holds it): model merging and interpolation
# (``merged.mul_(1 - t).add_(other, alpha=t)``) are not averages over time. A ``deepcopy``
# of a module may also be named ``avg``/``average``/``swa`` (its file holds ``deepcopy``);
# elsewhere those words are too common (Adam's ``exp_avg``, ``avgpool``, prose) to admit a
# file to parsing.
AVERAGE_WORDS = frozenset({"ema", "shadow", "polyak", "teacher"})
COPY_AVERAGE_WORDS = AVERAGE_WORDS | {"avg", "average", "averaged", "swa"}
AVERAGE_COMPOUNDS = (
    "momentum_update",
    "update_momentum",
    "momentum_encoder",
    "momentum_model",
    "target_net",
    "target_param",
    "target_model",
    "target_encoder",
    "soft_update",
    "update_target",
    "moving_average",
    "MovingAverage",
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
AVERAGED_WORDS = frozenset(
    {"ema", "shadow", "avg", "average", "averaged", "swa", "polyak", "teacher"}
)
TEACHER_TOKENS = {"teacher"}
TEACHER_PAIRS = [
    ("momentum", "encoder"),
    ("momentum", "model"),
    ("momentum", "net"),
    ("momentum", "backbone"),
    ("key", "encoder"),
    ("encoder", "k"),
    ("target", "encoder"),
    ("target", "backbone"),
    ("target", "projector"),
    ("target", "network", "byol"),
]
_PAIR_KEYS = {"momentum", "encoder", "target", "tgt"}
TARGET_PAIRS = [
    ("target", "net"),
    ("target", "network"),
    ("target", "q"),
    ("q", "target"),
    ("critic", "target"),
    ("target", "critic"),
    ("actor", "target"),
    ("target", "actor"),
    ("target", "model"),
    ("tgt", "net"),
    ("target", "policy"),
    ("target", "qf"),
    ("qf", "target"),
    ("target", "params"),
    ("target", "value"),
    ("value", "target"),
]

# The parameters of a helper given two sequences of tensors that say the first is averaged
# toward the second, each as (words of the shadow's name, words of the source's):
# ``def sync(target, source, k)``, ``def step(average, current, k)``. Only the two together:
# ``target`` alone is a label in most training code.
HELPER_PARAMETER_PAIRS = (
    (frozenset({"target", "tgt"}), frozenset({"source", "src", "online"})),
    (frozenset({"average", "averaged", "avg"}), frozenset({"current", "cur", "live"})),
)


_PAIRS = (*TEACHER_PAIRS, *TARGET_PAIRS)
# Every identifier ``averaged_identifier`` accepts holds one of these words, in lower, Title
# or UPPER case (each pair holds ``momentum``, ``encoder``, ``target`` or ``tgt``).
AVERAGED_NAME_WORDS = tuple(
    sorted({*AVERAGED_WORDS, *(w for p in _PAIRS for w in p if w in _PAIR_KEYS)})
)


# Words of a tree's or tensor's name that say it is not weights. ``updates`` is optax's name
# for the transformed gradients a ``GradientTransformation`` returns.
NOT_WEIGHT_TOKENS = {
    "loss",
    "losses",
    "metric",
    "metrics",
    "acc",
    "accuracy",
    "grad",
    "grads",
    "gradient",
    "gradients",
    "updates",
    "variance",
    "reward",
}


def tokens(name: str) -> list[str]:
    """``self.model_ema`` -> [model, ema]; ``modelEMA`` -> [model, ema]."""
    last = name.rsplit(".", 1)[-1]
    return [t.lower() for t in _TOKEN.findall(last)]


def has_pair(words: list[str], pair: tuple[str, ...]) -> bool:
    return all(w in words for w in pair)


def names_averaging_pair(shadow: str, source: str) -> bool:
    """The names of a helper's two sequences say the first is averaged toward the second
    (``target``/``source``, ``average``/``current``; see HELPER_PARAMETER_PAIRS)."""
    shadow_words, source_words = set(tokens(shadow)), set(tokens(source))
    return any(
        shadow_words & first and source_words & second for first, second in HELPER_PARAMETER_PAIRS
    )


def is_averaged_name(name: str) -> bool:
    """A name that says it holds averaged weights: one of its words is an average's
    (``ema``, ``shadow``, ``swa``...), or one of its identifiers pairs two words that name
    a teacher or a target network (``encoder_k``, ``target_net``, ``q_target``)."""
    last = name.rsplit(".", 1)[-1]
    return any(averaged_identifier(part) for part in _IDENTIFIER.findall(last))


# "avg" in these names is no average of weights: a pooling layer or an average-pool
# downsampling option (``AvgPool2d``, ``adaptive_avg_pool2d``, ``avg_down``,
# ``avg_shortcut``, ``downsample_avg``) or an optimizer's running moments of the gradients
# (Adam's ``exp_avg``/``exp_avg_sq``, RMSprop's ``square_avg``). In a model library they
# are in most files, next to weights read and a ``1 -``.
_POOLING_TOKENS = frozenset({"pool", "pooling", "down", "downsample", "shortcut", "stride"})
_MOMENT_TOKENS = frozenset({"exp", "avg", "sq", "sqs", "max", "square", "row", "col"})
_LOOSE_AVERAGE_WORDS = frozenset({"avg", "average"})


def _not_weights(words: set[str]) -> bool:
    """The only average word is "avg"/"average" and it names a layer or gradient moments."""
    if not (words & AVERAGED_WORDS) <= _LOOSE_AVERAGE_WORDS:
        return False
    if words & _POOLING_TOKENS:
        return True
    if "avg" not in words or not words & {"exp", "sq", "square"}:
        return False
    # Moments also carry an optimizer's or a schedule's words (Muon's ``adamw_exp_avg_sqs``,
    # LaProp's ``exp_avg_lr_1``); an averaged copy of weights says what it holds.
    return words <= _MOMENT_TOKENS or not words & _HOLDS_WEIGHTS


_HOLDS_WEIGHTS = frozenset(
    {"model", "models", "net", "network", "module", "param", "params", "parameters", "weight"}
    | {"weights", "state", "encoder", "teacher", "student", "copy", "shadow"}
)


def averaged_identifier(identifier: str) -> bool:
    """``is_averaged_name`` for one identifier: what the pre-filter tests on a file's names."""
    lower = identifier.lower()
    if not any(word in lower for word in AVERAGED_NAME_WORDS):
        return False  # every accepted identifier holds one (a shortcut, same answer)
    words = set(tokens(identifier))
    if not words.isdisjoint(AVERAGED_WORDS):
        return not _not_weights(words)
    return any(words.issuperset(pair) for pair in _PAIRS)


def average_word_identifier(identifier: str) -> bool:
    """An identifier with a word of AVERAGE_WORDS: what ``names_an_average`` looks for."""
    lower = identifier.lower()
    if not any(word in lower for word in AVERAGE_WORDS):
        return False
    return not AVERAGE_WORDS.isdisjoint(tokens(identifier))


def names_an_average(code: str, words: frozenset[str] = AVERAGE_WORDS) -> bool:
    """Whether an identifier (or an expression's code) names an average."""
    if any(compound in code for compound in AVERAGE_COMPOUNDS):
        return True
    return any(word in words for part in _IDENTIFIER.findall(code) for word in tokens(part))


# The pre-filter triggers for "a name of the file says it holds averaged weights" and "a
# name of the file names an average".
AVERAGED_NAME = names(averaged_identifier, AVERAGED_NAME_WORDS)
# ... and a name of the file's code (a parameter, a variable) says so.
AVERAGED_CODE_NAME = names(averaged_identifier, AVERAGED_NAME_WORDS, strings=False)
NAMED_AVERAGE = names(average_word_identifier, AVERAGE_WORDS)


# Receivers of ``.step()`` that are optimizers (not schedulers, environments, EMA objects).
OPTIMIZER_NAME = re.compile(r"(optim|^opt$|^opt_|_opt$|^opts?\d*$)", re.IGNORECASE)
_NOT_OPTIMIZER = re.compile(r"(sched|lr_|ema|swa|env|progress|bar|pbar|timer)", re.IGNORECASE)


def optimizer_name(receiver: str) -> bool:
    """``receiver`` of a ``.step()`` is named as an optimizer (``optimizer``, ``opt_g``),
    not as a scheduler, an environment or an averaging object (``lr_scheduler_optim``)."""
    return OPTIMIZER_NAME.search(receiver) is not None and not named_not_optimizer(receiver)


def named_not_optimizer(receiver: str) -> bool:
    """``receiver`` of a ``.step()`` is named as something that steps no weights: a
    scheduler, an environment, a progress display or an averaging object."""
    return _NOT_OPTIMIZER.search(receiver) is not None
