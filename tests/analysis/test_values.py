"""Constant folding, without any rule."""

from __future__ import annotations

import math

import libcst as cst
import pytest

from ema_lint.analysis.syntax.context import FileContext
from ema_lint.analysis.syntax.values import ValueResolver
from tests.analysis.helpers import context, probe


def resolve(source: str, expression: str):
    module = cst.parse_module(source + f"\n__probe__ = {expression}\n")
    ctx = FileContext(module, "t.py")
    probe = module.body[-1].body[0].value
    return ctx.get(ValueResolver).resolve(probe)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("0.999", 0.999),
        ("-0.5", -0.5),
        ("1 - 1e-4", 1 - 1e-4),
        ("0.5 ** (1 / 2000)", 0.5 ** (1 / 2000)),
        ("2 * 3 + 1", 7),
        ("'0.9999'", "0.9999"),
        ("True", True),
    ],
)
def test_literals_and_arithmetic(expression: str, expected) -> None:
    value = resolve("", expression)
    assert value is not None and value.value == pytest.approx(expected)


def test_module_constants_and_their_origin() -> None:
    value = resolve("DECAY = 0.99\nALIAS = DECAY", "ALIAS")
    assert value.value == 0.99 and value.via == "DECAY"
    assert isinstance(value.origin, cst.Float) and value.origin.value == "0.99"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("X = 0.9\nX = 0.99", 0.99),
        ("alpha = 1.0 - 0.99998\nalpha = min(1.0, alpha * 32)", min(1.0, (1.0 - 0.99998) * 32)),
        ("X = 0.9\nif fast:\n    pass\nX = 0.999", 0.999),
        ("for _ in range(3):\n    X = 0.9\n    __probe__ = X\n    X = 0.5", 0.9),
        ("X = 0.9999\nfor _ in range(3):\n    __probe__ = X\n    X = 0.9", None),
        ("X = 0.9999\nif fast:\n    X = 0.9\n__probe__ = X", None),
    ],
)
def test_a_rebound_name_has_the_value_that_reaches_the_use(source: str, expected) -> None:
    """Straight-line order decides; a branch or a later loop iteration in between does not."""
    if "__probe__" not in source:
        source += "\n__probe__ = " + ("X" if "X" in source else "alpha")
    ctx = context(source)
    value = ctx.get(ValueResolver).resolve(probe(ctx))
    if expected is None:
        assert value is None
    else:
        assert value is not None and value.value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("source", "expression"),
    [
        ("", "unknown_name"),
        ("X = 0.9\nX += 0.01", "X"),
        # A function reads the module's name when it runs, not where it is defined.
        ("X = 0.9\ndef f():\n    return X\nX = 0.99", "f()"),
        ("", "1 / 0"),
        ("", "f(0.9)"),
        ("A = B\nB = A", "A"),
    ],
)
def test_unknown_stays_unknown(source: str, expression: str) -> None:
    assert resolve(source, expression) is None


# Resolution paths -------------------------------------------------------------------------
from ema_lint.analysis.syntax.values import Symbol  # noqa: E402


def value_of(source: str):
    ctx = context(source)
    return ctx.get(ValueResolver).resolve(probe(ctx))


ARGPARSE = """
import argparse

def get_parser():
    p = argparse.ArgumentParser()
    p.add_argument("--model-ema-decay", type=float, default=0.9998)
    p.add_argument("--m", dest="momentum", default="0.0002", type=float)
    p.add_argument("--flag", action="store_true")
    p.add_argument("--rate", default=0.9)
    p.set_defaults(rate=0.99)
    return p

def main():
    args = get_parser().parse_args()
    __probe__ = {}
"""


@pytest.mark.parametrize(
    ("expression", "expected", "via"),
    [
        ("args.model_ema_decay", 0.9998, "--model-ema-decay default"),
        ("args.momentum", 0.0002, "--m default"),
        ("args.flag", False, "--flag default"),
        ("args.rate", 0.99, "--rate default"),
        ("self.args.model_ema_decay", 0.9998, "--model-ema-decay default"),
    ],
)
def test_argparse_defaults(expression: str, expected, via: str) -> None:
    value = value_of(ARGPARSE.replace("{}", expression))
    assert value is not None and value.value == pytest.approx(expected) and value.via == via


def test_argparse_reassigned_is_unknown() -> None:
    source = ARGPARSE.replace("__probe__ = {}", "args.model_ema_decay = 0.5\n    __probe__ = {}")
    assert value_of(source.replace("{}", "args.model_ema_decay")) is None


def test_argparse_value_stored_on_self_elsewhere_is_still_the_default() -> None:
    # ``self.model_ema_decay = model_ema_decay`` in a class stores a value on another
    # object: the parsed arguments keep their default.
    stored = "class Ema:\n    def __init__(self, model_ema_decay):\n"
    stored += "        self.model_ema_decay = model_ema_decay\n"
    value = value_of(stored + ARGPARSE.replace("{}", "args.model_ema_decay"))
    assert value is not None and value.value == pytest.approx(0.9998)
    other = ARGPARSE.replace("__probe__ = {}", "opts.model_ema_decay = 0.5\n    __probe__ = {}")
    assert value_of(other.replace("{}", "args.model_ema_decay")) is None  # may be an alias


DATACLASS = """
from dataclasses import dataclass, field
import attr

@dataclass
class Ema:
    decay: float = 0.9995

@dataclass
class Config:
    lr: float = 0.1
    ema_decay: float = 0.999
    ema: Ema = field(default_factory=Ema)

@attr.s
class Old:
    decay = attr.ib(default=0.98)

def train(cfg: Config, other):
    local = Config(0.2, 0.9)
    __probe__ = {}
"""


@pytest.mark.parametrize(
    ("expression", "expected", "via"),
    [
        ("cfg.ema_decay", 0.999, "Config.ema_decay default"),
        ("cfg.ema.decay", 0.9995, "Ema.decay default"),
        ("local.ema_decay", 0.9, ""),
        ("Old().decay", 0.98, "Old.decay default"),
        ("Config().lr", 0.1, "Config.lr default"),
    ],
)
def test_dataclass_fields(expression: str, expected, via: str) -> None:
    value = value_of(DATACLASS.replace("{}", expression))
    assert value is not None and value.value == pytest.approx(expected) and value.via == via


def test_unknown_objects_stay_unknown() -> None:
    assert value_of(DATACLASS.replace("{}", "other.ema_decay")) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("c = {'ema': {'decay': 0.99}}\n    __probe__ = c['ema']['decay']", 0.99),
        ("c = dict(ema_decay=0.98)\n    __probe__ = c['ema_decay']", 0.98),
        ("c = dict(ema_decay=0.98)\n    __probe__ = c.get('ema_decay', 0.5)", 0.98),
        ("c = {'x': 1}\n    __probe__ = c.get('ema_decay', 0.97)", 0.97),
        ("d = 0.96\n    __probe__ = d", 0.96),
        ("__probe__ = decay", 0.95),
        ("__probe__ = self_default()", None),
    ],
)
def test_dicts_locals_and_defaults(body: str, expected) -> None:
    source = f"def f(decay=0.95):\n    {body}\n"
    value = value_of(source)
    if expected is None:
        assert value is None
    else:
        assert value is not None and value.value == pytest.approx(expected)


@pytest.mark.parametrize(
    "body",
    [
        "c = {'ema_decay': 0.9}\n    c['ema_decay'] = 0.5\n    __probe__ = c['ema_decay']",
        "c = {'ema_decay': 0.9}\n    c.update(other)\n    __probe__ = c['ema_decay']",
        "c = {'ema_decay': 0.9, **other}\n    __probe__ = c.get('missing', 0.5)",
        "d = 0.9\n    if x:\n        d = 0.99\n    __probe__ = d",
        "d = 0.9\n    d *= 2\n    __probe__ = d",
        "for d in range(3):\n        pass\n    __probe__ = d",
    ],
)
def test_mutated_or_rebound_is_unknown(body: str) -> None:
    assert value_of(f"def f(decay=0.95):\n    {body}\n") is None


def test_callers_arguments_and_defaults() -> None:
    source = "def make(decay=0.9):\n    __probe__ = decay\nmake()\nmake(decay=0.9)\n"
    value = value_of(source)
    assert value is not None and value.value == 0.9
    disagree = "def make(decay=0.9):\n    __probe__ = decay\nmake(0.5)\nmake()\n"
    assert value_of(disagree) is None
    required = "def make(decay):\n    __probe__ = decay\nmake(0.99)\n"
    value = value_of(required)
    assert value is not None and value.value == 0.99 and value.origin is not None


def test_class_constants_and_self_attributes() -> None:
    source = """
class Trainer:
    DECAY = 0.999

    def __init__(self, ema_decay=0.995):
        self.ema_decay = ema_decay

    def a(self):
        __probe__ = self.DECAY

    def b(self):
        __other__ = self.ema_decay

Trainer(ema_decay=0.99)
"""
    ctx = context(source)
    resolver = ctx.get(ValueResolver)
    value = resolver.resolve(probe(ctx))
    assert value.value == 0.999 and value.via == "Trainer.DECAY"
    other = resolver.resolve(probe(ctx, "__other__"))
    assert other.value == 0.99


def test_symbols_math_and_half_life_form() -> None:
    value = value_of("import torch\nimport math\n__probe__ = torch.float16\n")
    assert value.value == Symbol("torch.float16")
    value = value_of("import math\n__probe__ = math.exp(-1 / 100)\n")
    assert value.value == pytest.approx(math.exp(-0.01)) and value.form == "half-life"
    value = value_of("B = 32\nH = 500_000\n__probe__ = 0.5 ** (B / H)\n")
    assert value.form == "half-life-samples" and value.via == "B"  # the batch over it
    value = value_of("H = 20\n__probe__ = 0.5 ** (1 / H)\n")
    assert value.form == "half-life"  # a half-life counted in updates
    assert value_of("__probe__ = min(0.9, 0.99)\n").value == 0.9


def test_possible_values_of_a_rebound_name() -> None:
    source = (
        "import torch\n"
        "def f(fp16):\n"
        "    dtype = torch.float32\n"
        "    if fp16:\n"
        "        dtype = torch.float16\n"
        "    __probe__ = dtype\n"
    )
    ctx = context(source)
    values = ctx.get(ValueResolver).possible(probe(ctx))
    assert [v.value for v in values] == [Symbol("torch.float32"), Symbol("torch.float16")]


def test_shared_constants_are_marked() -> None:
    value = value_of("D = 0.99\nx = D\n__probe__ = D\n")
    assert value.shared
    value = value_of("D = 0.99\n__probe__ = D\n")
    assert not value.shared


def test_visible_bindings_at_a_new_place() -> None:
    source = (
        "loader = make()\n"
        "def train(model, loader):\n"
        "    for x in loader:\n"
        "        model(x)\n"
        "    done = 1\n"
        "def main():\n"
        "    for epoch in range(3):\n"
        "        train(1, loader)\n"
        "    done = 2\n"
    )
    ctx = FileContext(cst.parse_module(source), "t.py")
    resolver = ctx.get(ValueResolver)
    uses = [n for n in ctx.nodes(cst.Name) if n.value == "loader"]
    in_train, module_level = uses[2], uses[3]  # `for x in loader` and `train(1, loader)`
    fors = ctx.nodes(cst.For)
    # After the loop of main(), `loader` is the module's; in train() it is the parameter.
    assert resolver.visible("loader", fors[1]) is resolver.bindings_of(module_level)
    assert resolver.visible("loader", fors[1]) is not resolver.bindings_of(in_train)
    assert resolver.visible("loader", fors[0]) is resolver.bindings_of(in_train)
    assert resolver.visible("nowhere", fors[0]) is None


def test_assigned_value_of_names_and_self_attributes() -> None:
    ctx = context(
        "once = model.state_dict()\n"
        "twice = 1\n"
        "twice = 2\n"
        "class EMA:\n"
        "    def __init__(self, model):\n"
        "        self.params = list(model.parameters())\n"
        "    def update(self):\n"
        "        __probe__ = self.params\n"
        "__probe__ = (once, twice)\n"
    )
    resolver = ctx.get(ValueResolver)
    once, twice = (e.value for e in probe(ctx).elements)
    assert ctx.code(resolver.assigned_value(once)) == "model.state_dict()"
    assert resolver.assigned_value(twice) is None
    method_probe = next(
        n.value
        for n in ctx.nodes(cst.Assign)
        if isinstance(n.value, cst.Attribute) and ctx.code(n.value) == "self.params"
    )
    assert ctx.code(resolver.assigned_value(method_probe)) == "list(model.parameters())"


def test_instance_class_through_names_attributes_chains_and_parameters() -> None:
    ctx = context(
        "class EMA:\n"
        "    pass\n"
        "class Trainer:\n"
        "    def __init__(self):\n"
        "        self.ema = EMA().to('cuda')\n"
        "    def step(self):\n"
        "        __probe__ = self.ema\n"
        "def use(e):\n"
        "    __probe__ = e\n"
        "ema = EMA()\n"
        "use(ema)\n"
        "other = Unknown()\n"
        "__probe__ = (ema, other)\n"
    )
    resolver = ctx.get(ValueResolver)
    probes = [
        n.value for n in ctx.nodes(cst.Assign) if ctx.code(n.targets[0].target) == "__probe__"
    ]
    self_ema, param, pair = probes
    assert resolver.instance_class(self_ema).name.value == "EMA"
    assert resolver.instance_class(param).name.value == "EMA"
    ema, other = (e.value for e in pair.elements)
    assert resolver.instance_class(ema).name.value == "EMA"
    assert resolver.instance_class(other) is None


SCHEDULED = """
import argparse
import math

parser = argparse.ArgumentParser()
parser.add_argument("--moco-m", default=0.99, type=float)
parser.add_argument("--epochs", default=100, type=int)


def adjust(epoch, args):
    return 1.0 - 0.5 * (1.0 + math.cos(math.pi * epoch / args.epochs)) * (1.0 - args.moco_m)


def unrelated(epoch, args):
    return 0.5 + epoch / args.epochs


def train(loader, model, epoch, args):
    m = args.moco_m
    for i, batch in enumerate(loader):
        if args.cos:
            m = {}
        __probe__ = m
"""


@pytest.mark.parametrize(
    ("rebinding", "expected"),
    [
        ("adjust(epoch + i / len(loader), args)", 0.99),  # a schedule read from the value
        ("unrelated(epoch, args)", None),  # another value: not the start of a schedule
        ("table[i]", None),  # read from data
        ("0.5", None),  # two values
    ],
)
def test_a_name_rescheduled_from_its_value_starts_at_it(rebinding: str, expected) -> None:
    ctx = context(SCHEDULED.replace("{}", rebinding))
    resolver = ctx.get(ValueResolver)
    target = probe(ctx)
    value = resolver.scheduled_from(target)
    if expected is None:
        assert value is None
    else:
        assert value is not None and value.value == pytest.approx(expected)
        assert value.via == "--moco-m default"
    if rebinding.startswith("adjust"):
        assert resolver.resolve(target) is None  # not a value of every run


def _loop_variable(source: str, name: str = "rate"):
    """The value of the last use of ``name`` in ``source``."""
    ctx = FileContext(cst.parse_module(source), "t.py")
    uses = [n for n in ctx.nodes(cst.Name) if n.value == name]
    return ctx.get(ValueResolver).resolve(uses[-1])


@pytest.mark.parametrize(
    ("sequence", "expected"),
    [
        ("[0.999]", 0.999),
        ("(0.99, 0.99)", 0.99),
        ("[0.9999, 0.999]", None),  # different rates: no one value
        ("[float(x) for x in '0.9'.split(',')]", 0.9),
        ("[float(x) for x in '0.9,0.9'.split(',')]", 0.9),
        ("[float(x) for x in '0.9,0.99'.split(',')]", None),
        ("[float(x) for x in 'a,b'.split(',')]", None),
        ("[x * 2 for x in '0.9'.split(',')]", None),  # not the items themselves
        ("list((0.95,))", 0.95),
    ],
)
def test_a_loop_variable_has_the_one_value_of_its_sequence(sequence: str, expected) -> None:
    source = f"RATES = {sequence}\nfor rate, p in zip(RATES, params):\n    use(rate)\n"
    value = _loop_variable(source)
    assert (value.value if value is not None else None) == expected


def test_rates_parsed_in_init_reach_the_loop_over_them() -> None:
    source = """
class Loop:
    def __init__(self, ema_rate):
        self.ema_rate = (
            [ema_rate] if isinstance(ema_rate, float) else [float(x) for x in ema_rate.split(",")]
        )

    def update(self):
        for rate, params in zip(self.ema_rate, self.ema_params):
            use(rate)

Loop(ema_rate=ARG)
"""
    for arg, expected in (('"0.99"', 0.99), ("0.9", 0.9), ('"0.9,0.99"', None), ("1", None)):
        value = _loop_variable(source.replace("ARG", arg))
        assert (value.value if value is not None else None) == expected, arg


def test_enumerate_gives_the_element_and_other_unpacking_gives_nothing() -> None:
    assert _loop_variable("for i, rate in enumerate([0.9]):\n    use(rate)\n").value == 0.9
    assert _loop_variable("for rate, p in pairs([0.9]):\n    use(rate)\n") is None


def test_options_made_from_a_dict_of_defaults() -> None:
    source = """
import argparse

def create_argparser():
    defaults = dict(lr=1e-4, ema_rate="0.9999", decay=0.5)
    defaults.update(model_defaults())
    defaults["decay"] = other()
    parser = argparse.ArgumentParser()
    add_dict_to_argparser(parser, defaults)
    return parser

args = create_argparser().parse_args()
"""
    assert resolve(source, "args.ema_rate").value == "0.9999"
    assert resolve(source, "args.lr").value == 1e-4
    assert resolve(source, "args.decay") is None  # rewritten after the dict is made


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("cosine_scheduler(0.996, 1, 100, 10)", 0.996),
        ("utils.cosine_scheduler(BASE, 1.0, 100, 10)", 0.99),
        ("CosineScheduler(base_value=0.99, final_value=1.0)", 0.99),
        ("np.linspace(0.95, 0.999, 1000)", 0.95),
        ("np.linspace(0.0, 0.999, 1000)", None),  # a warmup from zero: no decay
        ("cosine_scheduler(0.9999, 0.9, 100, 10)", None),  # falls: not a start to judge
        ("make_table(0.996, 1)", None),  # not a schedule
    ],
)
def test_an_element_of_a_rising_schedule_is_its_start(schedule: str, expected) -> None:
    source = f"import numpy as np\nBASE = 0.99\nschedule = {schedule}\n"
    value = resolve(source, "schedule[it]")
    assert (value.value if value is not None else None) == expected
    if value is not None:
        assert value.form == "schedule-start"


def test_a_schedule_passed_to_the_training_function_is_followed() -> None:
    source = """
def train_one_epoch(loader, momentum_schedule):
    for it, batch in enumerate(loader):
        m = momentum_schedule[it]

train_one_epoch(loader, cosine_scheduler(0.996, 1, 10, 10))
"""
    assert _loop_variable(source, "m").value == 0.996


_OWN_FIELD = """
import equinox as eqx
from dataclasses import dataclass, field


@dataclass
class Shadow:
    model: object
    shadow: object = field(init=False)
    decay: float = 0.9999

    def update(self):
        __probe__ = self.decay


class Eqx(eqx.Module):
    decay: float = 0.9999

    def update(self):
        __probe__ = self.decay
"""


@pytest.mark.parametrize(
    ("constructions", "expected"),
    [
        ("Shadow(m, 0.9)\n", 0.9),  # the ``init=False`` field takes no position
        ("Shadow(m, decay=0.9)\nShadow(n, decay=0.9)\n", 0.9),
        ("", 0.9999),  # no construction here: the default
        ("Shadow(m, decay=0.9)\nShadow(n)\n", None),  # two values
        ("Shadow(m, decay=0.9)\nx = s.replace(decay=0.5)\n", None),
    ],
)
def test_own_field_of_a_dataclass(constructions: str, expected) -> None:
    ctx = context(_OWN_FIELD + constructions)
    value = ctx.get(ValueResolver).resolve(_first_probe(ctx))
    assert (value.value if value is not None else None) == expected


def _first_probe(ctx: FileContext) -> cst.BaseExpression:
    for node in ctx.nodes(cst.Assign):
        target = node.targets[0].target
        if isinstance(target, cst.Name) and target.value == "__probe__":
            return node.value
    raise AssertionError("no probe")


def test_equinox_module_is_a_dataclass_and_nn_module_is_not() -> None:
    ctx = context(_OWN_FIELD + "Eqx(decay=0.95)\n")
    value = ctx.get(ValueResolver).resolve(probe(ctx))
    assert value is not None and value.value == 0.95
    plain = context(_OWN_FIELD.replace("eqx.Module", "torch.nn.Module") + "Eqx(decay=0.95)\n")
    # A plain class: the annotated class attribute, not what the construction passes.
    value = plain.get(ValueResolver).resolve(probe(plain))
    assert value is not None and value.value == 0.9999
