"""The pre-filter: sound (never skips a file a rule reports on) and as tight as its triggers."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ema_lint import registry
from ema_lint.prefilter import (
    PreFilter,
    component,
    identifier,
    identifier_components,
    names,
)
from ema_lint.rule import Rule
from tests.fixture_cases import all_cases


def _rule(*triggers: bytes) -> type[Rule]:
    return type("Made", (Rule,), {"code": "EMA999", "name": "made", "triggers": triggers})


def test_every_fixture_with_a_finding_passes_the_union_of_all_rules() -> None:
    """The run's filter (the union) admits every case any rule reports on, as bytes and text."""
    union = PreFilter(registry.all_rules())
    for case in all_cases():
        if not [c for c, _, _ in case.expected() if not registry.is_internal(c)]:
            continue
        data = case.path.read_bytes()
        assert union.matches(data), case.id
        assert union.matches(data.decode("utf-8")), case.id
        assert registry.default_prefilter().matches(data), case.id


def test_every_fixture_with_a_finding_passes_the_filter_of_that_rule_alone() -> None:
    """``--select EMA204`` filters with EMA204's triggers only: each must admit its cases."""
    by_code = registry.by_code()
    for case in all_cases():
        data = case.path.read_bytes()
        for code in {c for c, _, _ in case.expected() if not registry.is_internal(c)}:
            assert PreFilter([by_code[code]]).matches(data), (case.id, code)
            assert PreFilter([by_code[code]]).matches(data.decode("utf-8")), (case.id, code)


def test_default_is_the_union_of_every_registered_rule() -> None:
    assert registry.default_prefilter().tokens == PreFilter(registry.all_rules()).tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model_ema = x", True),
        ("ema_model.update()", True),
        ("self.ema.update(model)", True),
        ("ModelEmaV2(model)", True),
        ("EMAModel(params)", True),
        ("USE_EMA = True", True),
        ("emaDecay = 0.9", True),
        ("ema2 = 1", True),
        ("x = getattr(cfg, 'ema')", True),  # strings count: configs name EMA keys
        ("schema = load()", False),
        ("remain = 3", False),
        ("Emacs = None", False),
        ("EMAIL = 'a@b'", False),
        ("EMAs = []", False),
        ("THEMA = 1", False),
        ("swap = 1", False),
        ("", False),
    ],
)
def test_component_triggers(text: str, expected: bool) -> None:
    rule = _rule(component("ema"), component("swa"))
    assert PreFilter([rule]).matches(text.encode()) is expected
    assert PreFilter([rule]).matches(text) is expected


def test_identifier_trigger_is_a_whole_identifier() -> None:
    f = PreFilter([_rule(identifier("EMA"))])
    assert f.matches(b"from ema_pytorch import EMA\n")
    assert f.matches(b"e = ema_pytorch.EMA(m)")
    assert not f.matches(b"SCHEMA = 1\nEMAIL = 2\nEMA_X = 3\n")


def test_plain_triggers_are_substrings() -> None:
    f = PreFilter([_rule(b"update_bn", b"lerp_")])
    assert f.matches(b"torch.optim.swa_utils.update_bn(loader, model)")
    assert f.matches(b"p.lerp_(q, 0.1)")
    assert not f.matches(b"p.mul_(0.9)")


def test_union_of_rules_and_gates() -> None:
    f = PreFilter([_rule(b"ModelEmaV2", b"ModelEma"), _rule(component("ema"), b"update_bn")])
    # ModelEma holds the gate Ema: one scan covers both literals and the component.
    assert b"ModelEma" not in f.gates and b"ModelEmaV2" not in f.gates
    assert f.matches(b"x = ModelEmaV2(m)")
    assert f.matches(b"ModelEmax")  # a plain literal is a substring, even inside a word
    assert f.matches(b"update_bn(l, m)")
    assert not f.matches(b"Emax = 1")


def test_a_rule_without_triggers_sees_every_file() -> None:
    assert PreFilter([_rule()]).matches(b"x = 1")
    assert PreFilter([_rule(b"")]).matches(b"x = 1")


def test_internal_rules_do_not_open_the_filter() -> None:
    internal = [r for r in registry.all_rules() if getattr(r, "internal", False)]
    assert internal
    assert not PreFilter(internal).matches(b"x = 1")


def test_bad_triggers_are_refused() -> None:
    with pytest.raises(TypeError):
        PreFilter([_rule("ema")])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        component("EMA")
    with pytest.raises(ValueError):
        identifier("not an identifier")


def test_non_ascii_literal_matches_text_and_bytes() -> None:
    f = PreFilter([_rule("décroissance".encode())])
    assert f.matches("x = 'décroissance'")
    assert f.matches("x = 'décroissance'".encode())
    assert not f.matches("x = 'decroissance'")


def test_identifier_components() -> None:
    assert identifier_components("EMAModel") == ["ema", "model"]
    assert identifier_components("ModelEmaV2") == ["model", "ema", "v", "2"]
    assert identifier_components("model_ema") == ["model", "ema"]
    assert identifier_components("USE_EMA") == ["use", "ema"]
    assert identifier_components("schema") == ["schema"]
    assert identifier_components("EMAIL") == ["email"]


_pieces = st.sampled_from(
    ["ema", "Ema", "EMA", "eMA", "emA", "s", "S", "x", "X", "Model", "MODEL", "_", "2", "ch", "il"]
)
_identifiers = st.lists(_pieces, min_size=1, max_size=6).map("".join)


@given(_identifiers)
def test_component_match_agrees_with_identifier_components(name: str) -> None:
    """Sound and tight: on any identifier the filter matches iff ``ema`` is a component."""
    f = PreFilter([_rule(component("ema"))])
    expected = "ema" in identifier_components(name)
    assert f.matches(name.encode()) is expected, identifier_components(name)
    assert f.matches(name) is expected


@given(st.lists(_identifiers, min_size=1, max_size=5), st.sampled_from([" ", ".", "(", "\n", "'"]))
def test_component_match_in_text_is_any_identifier(names: list[str], sep: str) -> None:
    """In a text of several identifiers the filter matches iff one of them has the component."""
    text = sep.join(names)
    words = re.findall(r"[A-Za-z0-9_]+", text)
    expected = any("ema" in identifier_components(w) for w in words)
    assert PreFilter([_rule(component("ema"))]).matches(text.encode()) is expected


@given(
    st.lists(st.sampled_from([b"EMA", b"ModelEma", b"update_bn", b"lerp_", b"AveragedModel"])),
    st.binary(max_size=40),
    st.sampled_from([b"", b"EMA", b"update_b", b"lerp", b"AveragedModel", b"ModelEm"]),
)
def test_literal_union_is_exactly_any_substring(
    triggers: list[bytes], noise: bytes, inserted: bytes
) -> None:
    data = noise[:20] + inserted + noise[20:]
    f = PreFilter([_rule(*triggers)])
    expected = any(t in data for t in triggers) if triggers else True
    assert f.matches(data) is expected


def _grouped(*groups: tuple[tuple[bytes, ...], ...]) -> type[Rule]:
    attributes = {"code": "EMA999", "name": "grouped", "triggers": (), "trigger_groups": groups}
    return type("Grouped", (Rule,), attributes)


def test_an_api_is_found_through_its_package() -> None:
    """An API's name admits a file only with its package (its import spells it)."""
    from ema_lint.analysis.objects.triggers import OBJECT_EVIDENCE

    f = PreFilter([_grouped(*OBJECT_EVIDENCE.groups)])
    assert f.matches(b"from ema_pytorch import EMA\nema = EMA(model)\n")
    assert f.matches(b"import ema_pytorch as ep\nema = ep.EMA(model)\n")
    assert f.matches(b"from timm.utils import ModelEmaV3 as E\n")
    assert not f.matches(b"# EMA of the weights\nEMA = 0.999\n")  # no package
    assert not f.matches(b"from .ema import EMA\n")  # a relative import resolves to nothing
    # A registry name needs no import: configs name the hook as a string.
    g = PreFilter([type("R", (Rule,), {"code": "EMA999", "triggers": OBJECT_EVIDENCE.triggers})])
    assert g.matches(b"custom_hooks = [dict(type='EMAHook', momentum=0.1)]\n")


def test_a_deepcopy_counts_only_with_an_averaged_name() -> None:
    from ema_lint.analysis.objects.triggers import OBJECT_EVIDENCE

    f = PreFilter([_grouped(*OBJECT_EVIDENCE.groups)])
    assert f.matches(b"import copy\nmodel_ema = copy.deepcopy(model)\n")
    assert f.matches(b"import copy\nself.encoder_k = copy.deepcopy(self.encoder_q)\n")
    assert f.matches(b"import copy\ntgt_net = copy.deepcopy(net)\n")
    assert f.matches(b"import copy\nm = copy.deepcopy(x)\ndef soft_update(a, b): ...\n")
    assert not f.matches(b"import copy\nbest = copy.deepcopy(model)\ntarget = y\n")
    assert not f.matches(b"import copy\nm = copy.deepcopy(model)  # schema, remaining\n")


def test_names_trigger_runs_its_test_on_the_files_identifiers() -> None:
    seen: list[str] = []

    def probe_name(name: str) -> bool:
        seen.append(name)
        return name == "net_target_x"

    f = PreFilter([_rule(names(probe_name, ["target"]))])
    assert f.matches(b"a = net_target_x\n") and f.matches("a = net_target_x\n")
    assert not f.matches(b"targets = net_target_y\n")
    seen.clear()
    assert not f.matches(b"nothing here at all\n")
    assert seen == []  # no word of the test: no identifier tested
    with pytest.raises(ValueError):
        names(probe_name, ["Target"])


def _gate_by_gate(f: PreFilter) -> PreFilter:
    """The same filter scanning each gate with ``in`` (as without the automaton)."""
    f.__dict__["_scanner"] = None
    return f


_GATES = registry.default_prefilter().gates
_GATE_WORDS = sorted({g.decode() for g in _GATES} | {"ema", "EMA", "swa"})


@given(
    st.lists(
        st.one_of(st.sampled_from(_GATE_WORDS), st.text("abEMx_ .(\n", max_size=6)), max_size=8
    )
)
def test_the_one_pass_scan_finds_what_the_gate_by_gate_scan_finds(parts: list[str]) -> None:
    text = "".join(parts)
    one_pass = registry.default_prefilter()
    assert one_pass._scanner is not None  # the automaton is installed and used
    present = one_pass._present(text.encode())
    assert present == {g: g in text.encode() for g in present}
    by_gate = _gate_by_gate(PreFilter(registry.infos()))
    assert one_pass.matches(text.encode()) is by_gate.matches(text.encode())
    assert one_pass.matches(text) is by_gate.matches(text)
    # Text is matched through its UTF-8 spelling, as the file holds it.
    assert one_pass.matches(text) is one_pass.matches(text.encode("utf-8", "surrogatepass"))


def test_the_one_pass_scan_covers_the_gates_of_every_group() -> None:
    f = registry.default_prefilter()
    _, gates = f._scanner
    for group in f._groups:
        for part in group:
            assert {step[0] for step in part._bytes.steps} <= set(gates)


def test_the_pre_filter_imports_neither_the_registry_nor_the_manifest() -> None:
    """No import cycle registry -> manifest -> prefilter -> registry (not even in a function)."""
    import ast
    from pathlib import Path

    import ema_lint.prefilter as module

    tree = ast.parse(Path(module.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1
        for alias in node.names
    } | {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
    }
    assert not imported & {"registry", "manifest", "_manifest"}


def test_ema407_needs_an_assignment_to_a_layers_momentum() -> None:
    only = PreFilter([registry.by_code()["EMA407"]])
    bn = "bn = nn.BatchNorm2d(8, momentum=0.01)\nfor m in model.modules():\n    pass\n"
    assert not only.matches(bn)
    frozen = "for m in model.modules():\n    m.momentum = 0.0\n"
    assert only.matches(frozen) and only.matches(frozen.encode())


def test_several_name_tests_of_one_file_agree_with_each_alone() -> None:
    # The filter scans a file's names once per kind and shares them between its name tests.
    from ema_lint.analysis.syntax.vocabulary import AVERAGED_CODE_NAME, AVERAGED_NAME

    both = PreFilter([_rule(AVERAGED_CODE_NAME), _rule(AVERAGED_NAME)])
    for text in ("x = ckpt['ema']\n", "model_ema = 1\n", "x = 1  # ema\n", "getattr(m[0], 'ema')"):
        alone = PreFilter([_rule(AVERAGED_NAME)]).matches(text)
        assert both.matches(text) == alone, text
    assert PreFilter([_rule(AVERAGED_NAME)]).matches("getattr(models[0], 'ema')\n")
    assert not PreFilter([_rule(AVERAGED_CODE_NAME)]).matches("x = ckpt['ema']\n")


def _code_name_passes(data: bytes | str, trigger: bytes, strings: bool) -> bool:
    """The definition a name test answers: some name of the code, with a word, passes."""
    from ema_lint.prefilter import code_names

    test, words = trigger.test, trigger.words  # type: ignore[attr-defined]
    found = (n if isinstance(n, str) else n.decode() for n in code_names(data, strings))
    return any(test(n) for n in found if any(w in n.lower() for w in words))


@given(
    st.lists(
        st.sampled_from(
            [
                "model_ema",
                "ema",
                "x",
                " = ",
                "'",
                '"',
                '"""',
                "#",
                "\n",
                "f",
                "[",
                "getattr(m, ",
                "target_net",
                " ",
                "(",
                ")",
                "schema",
                "docs: ",
            ]
        ),
        max_size=12,
    )
)
def test_a_name_test_on_the_whole_texts_names_first_agrees_with_the_code_names(
    parts: list[str],
) -> None:
    # The test runs on every identifier of the text before the code's own are told apart
    # (the two kinds share that first answer): each kind still answers for its own names.
    from ema_lint.analysis.syntax.vocabulary import AVERAGED_CODE_NAME, AVERAGED_NAME
    from ema_lint.prefilter import _any_name

    text = "".join(parts)
    data = text.encode()
    seen: dict[object, object] = {}
    for trigger, strings in ((AVERAGED_NAME, True), (AVERAGED_CODE_NAME, False)):
        expected = _code_name_passes(data, trigger, strings)
        assert _any_name(data, trigger, seen) is expected, (text, strings)
        assert _any_name(data, trigger) is expected, (text, strings)


def test_a_name_only_in_prose_or_a_key_answers_per_kind() -> None:
    from ema_lint.analysis.syntax.vocabulary import AVERAGED_CODE_NAME, AVERAGED_NAME
    from ema_lint.prefilter import _any_name

    for data, named, coded in (
        (b"x = 1  # model_ema\n", False, False),
        (b'"""the model_ema"""\nx = 1\n', False, False),
        (b"x = ckpt['model_ema']\n", True, False),
        (b"model_ema = 1\n", True, True),
    ):
        seen: dict[object, object] = {}
        assert _any_name(data, AVERAGED_NAME, seen) is named, data
        assert _any_name(data, AVERAGED_CODE_NAME, seen) is coded, data
