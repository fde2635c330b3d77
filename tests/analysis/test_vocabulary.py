"""The naming vocabulary: the analysis and the pre-filter test names with the same functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ema_lint.analysis.syntax.vocabulary import (
    AVERAGED_NAME,
    AVERAGED_NAME_WORDS,
    AVERAGED_WORDS,
    NAMED_AVERAGE,
    TARGET_PAIRS,
    TEACHER_PAIRS,
    average_word_identifier,
    averaged_identifier,
    is_averaged_name,
    names_an_average,
)
from ema_lint.prefilter import PreFilter
from ema_lint.rule import Rule


def _filter(*triggers: bytes) -> PreFilter:
    return PreFilter([type("Probe", (Rule,), {"code": "EMA999", "triggers": triggers})])


def test_every_pair_holds_a_gate_word() -> None:
    assert set(AVERAGED_WORDS) <= set(AVERAGED_NAME_WORDS)
    for pair in (*TEACHER_PAIRS, *TARGET_PAIRS):
        assert set(pair) & set(AVERAGED_NAME_WORDS), pair


def test_pairs_count_inside_one_identifier() -> None:
    assert is_averaged_name("self.encoder_k")
    assert is_averaged_name("target_net")
    assert is_averaged_name("q_target")
    assert is_averaged_name("models['ema']")
    assert not is_averaged_name("target[net]")  # two names, not a target network
    assert not is_averaged_name("model[k]")
    assert not is_averaged_name("model_k")  # ``k`` with ``model`` is too common a pair
    assert not is_averaged_name("targets")


_WORDS = st.sampled_from(
    [
        *AVERAGED_NAME_WORDS,
        *(w for pair in (*TEACHER_PAIRS, *TARGET_PAIRS) for w in pair),
        "model",
        "schema",
        "remain",
        "em",
        "a",
        "x",
        "2",
        "v",
    ]
)


@st.composite
def _identifiers(draw: st.DrawFn) -> str:
    parts = draw(st.lists(_WORDS, min_size=1, max_size=4))
    style = draw(st.sampled_from(["snake", "camel", "upper", "joined"]))
    if style == "snake":
        name = "_".join(parts)
    elif style == "camel":
        name = parts[0] + "".join(p.capitalize() for p in parts[1:])
    elif style == "upper":
        name = "_".join(parts).upper()
    else:
        name = "".join(parts)
    return name if not name[0].isdigit() else "_" + name


@given(_identifiers(), st.sampled_from(["x = {}\n", "self.{}.update()", "d['{}']", "({})"]))
def test_the_name_triggers_admit_every_name_the_tests_accept(name: str, shape: str) -> None:
    text = shape.format(name)
    if averaged_identifier(name):
        assert _filter(AVERAGED_NAME).matches(text), name
        assert _filter(AVERAGED_NAME).matches(text.encode()), name
    if average_word_identifier(name):
        assert _filter(NAMED_AVERAGE).matches(text), name
    # The analysis' tests of a whole expression reduce to these, name by name.
    assert is_averaged_name(text) == any(averaged_identifier(n) for n in _names(text))
    assert names_an_average(name) == (average_word_identifier(name) or _compound(name)), name


def _names(text: str) -> list[str]:
    import re

    last = text.rsplit(".", 1)[-1]
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", last)


def _compound(name: str) -> bool:
    from ema_lint.analysis.syntax.vocabulary import AVERAGE_COMPOUNDS

    return any(c in name for c in AVERAGE_COMPOUNDS)


def test_pooling_layers_and_gradient_moments_are_not_averaged_weights() -> None:
    # "avg" names a layer or an optimizer's moments here, never a copy of the weights.
    for name in ("AvgPool2d", "avg_pool", "adaptive_avg_pool2d", "average_pooling", "avg_down"):
        assert not averaged_identifier(name), name
    for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "square_avg"):
        assert not averaged_identifier(name), name
    # Moments with an optimizer's or a schedule's words around them (Muon, LaProp).
    for name in ("adamw_exp_avg_sqs", "muon_exp_avg_sqs", "exp_avg_lr_1", "grouped_exp_avg"):
        assert not averaged_identifier(name), name
    # A word that says so still does, whatever else the name holds.
    for name in (
        "avg_model",
        "avg_params",
        "exp_avg_model",
        "exp_avg_weights",
        "ema_pool",
        "swa_pool_model",
    ):
        assert averaged_identifier(name), name


@given(_identifiers(), st.sampled_from(["# {}\n", '"""A {} here."""\n', "x = 'the {} of it'\n"]))
def test_names_in_prose_admit_nothing(name: str, shape: str) -> None:
    # Comments, docstrings and messages name nothing the analysis reads.
    text = shape.format(name)
    assert not _filter(AVERAGED_NAME).matches(text), text
    assert not _filter(AVERAGED_NAME).matches(text.encode()), text


def test_names_in_name_like_strings_and_f_strings_admit() -> None:
    probe = _filter(AVERAGED_NAME)
    assert probe.matches("decay = cfg['ema_decay']\n")  # a config key
    assert probe.matches('print(f"decay {model_ema.decay}")\n')  # a field of an f-string
    assert probe.matches("s = '# not a comment'; model_ema = 1\n")
    assert not probe.matches("s = 'a # b'  # model_ema\n")


def test_value_strings_name_nothing_and_key_strings_do() -> None:
    probe = _filter(AVERAGED_NAME)
    values = ("m = Net(global_pool='avg')\n", "if mode == 'ema': pass\n", "x = ('avg', 'max')\n")
    for text in values:
        assert not probe.matches(text), text
    for text in ("w = ckpt['ema']\n", "e = getattr(args, 'ema')\n", "d = cfg.get('ema_decay')\n"):
        assert probe.matches(text), text
        assert probe.matches(text.encode()), text
