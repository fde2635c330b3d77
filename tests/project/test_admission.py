"""Which files the pre-filter rejected are still parsed because of what they import: only a
name the file takes from the project whose definition is about averaging admits it."""

from __future__ import annotations

from pathlib import Path

from ema_lint.analysis.project.admission import project_admits

_AVERAGING = """
import copy


class Smoother:
    def __init__(self, model, rate):
        self.rate = rate
        self.ema = copy.deepcopy(model)


def load_schema(path):
    return {"schema": path}
"""


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "setup.cfg").write_text("")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _admits(root: Path, importer: str) -> bool:
    path = root / "train.py"
    path.write_text(importer)
    return project_admits(str(path), importer.encode())


def test_the_averaging_class_admits_and_another_name_of_its_module_does_not(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path, {"tools.py": _AVERAGING})
    assert _admits(root, "from tools import Smoother\ns = Smoother(net, 0.9)\n")
    assert not _admits(root, "from tools import load_schema\nload_schema('a')\n")


def test_words_inside_other_words_and_strings_are_no_evidence(tmp_path: Path) -> None:
    text = 'SCHEMA = 1\n\n\ndef remaining(schema, EMAIL):\n    return "ema", schema\n'
    root = _project(tmp_path, {"util.py": text})
    assert not _admits(root, "from util import remaining\nremaining(1, 2)\n")


def test_multi_line_imports_and_reexports_are_followed(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            "pkg/__init__.py": "from .averaging import (\n    Smoother,  # the EMA\n)\n",
            "pkg/averaging.py": _AVERAGING,
        },
    )
    assert _admits(root, "from pkg import (\n    Smoother,\n)\n")
    assert not _admits(root, "from pkg import (\n    load_schema,\n)\n")


def test_a_module_imported_whole_admits_through_the_names_it_is_used_for(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path, {"tools.py": _AVERAGING})
    assert _admits(root, "import tools as t\ns = t.Smoother(net, 0.9)\n")
    assert not _admits(root, "import tools as t\nt.load_schema('a')\n")


def test_averaging_named_only_in_comments_and_docstrings_is_no_evidence(tmp_path: Path) -> None:
    prose = (
        "class Blend:\n"
        '    """Returns a weighted average of the two images (like an EMA)."""\n\n'
        "    def __call__(self, a, b):\n"
        "        # the exponential moving average of nothing\n"
        "        return a + b\n"
    )
    code = prose + "\n\ndef shadow_of(model):\n    return {'shadow': model.state_dict()}\n"
    root = _project(tmp_path, {"blend.py": code})
    assert not _admits(root, "from blend import Blend\nBlend()(1, 2)\n")
    assert _admits(root, "from blend import shadow_of\nshadow_of(net)\n")


_HELPER = """
def train_one_epoch(model, loader, optimizer, tracker):
    for x, y in loader:
        model(x).sum().backward()
        tracker.update(model)
        optimizer.step()
"""


def _receives(root: Path, name: str) -> bool:
    path = root / name
    return project_admits(str(path), path.read_bytes())


def test_a_helper_is_admitted_when_a_caller_hands_it_an_averaged_object(tmp_path: Path) -> None:
    caller = "from engine import train_one_epoch\n\ntrain_one_epoch(net, data, opt, model_ema)\n"
    root = _project(tmp_path, {"engine.py": _HELPER, "main.py": caller})
    assert _receives(root, "engine.py")


def test_a_name_bound_from_an_averaging_maker_counts_and_other_bindings_do_not(
    tmp_path: Path,
) -> None:
    made = "from engine import train_one_epoch\ntracker = timm.utils.ModelEmaV3(net)\n"
    root = _project(
        tmp_path,
        {"engine.py": _HELPER, "main.py": made + "train_one_epoch(net, d, o, tracker)\n"},
    )
    assert _receives(root, "engine.py")
    # A value that only mentions an averaged name is not made by it.
    other = "from engine import train_one_epoch\ntracker = build(encoder_key)\n"
    (root / "main.py").write_text(other + "train_one_epoch(net, d, o, tracker)\n")
    assert not _receives(root, "engine.py")


def test_no_caller_or_a_plain_argument_admits_nothing(tmp_path: Path) -> None:
    plain = "from engine import train_one_epoch\n\ntrain_one_epoch(net, data, opt, meter)\n"
    root = _project(tmp_path, {"engine.py": _HELPER, "main.py": plain})
    assert not _receives(root, "engine.py")
    # The averaged name in a comment or a docstring is no argument.
    (root / "main.py").write_text(plain.replace("meter)", "meter)  # model_ema"))
    assert not _receives(root, "engine.py")
    # A module that does not train is judged at its call, not parsed for it.
    (root / "engine.py").write_text("def evaluate(model, loader):\n    return model(loader)\n")
    (root / "main.py").write_text("from engine import evaluate\nevaluate(model_ema, data)\n")
    assert not _receives(root, "engine.py")


def test_messages_and_lerps_of_no_weights_are_no_evidence(tmp_path: Path) -> None:
    # A lerp of latents, and "average" in an error message, say nothing about weights.
    pipeline = (
        "import torch\n\n\n"
        "class Blender:\n"
        "    def __call__(self, a, b, t):\n"
        "        if t < 0:\n"
        "            raise ValueError('t must be a positive average weight')\n"
        "        return torch.lerp(a, b, t)\n"
    )
    # A lerp of a model's parameters is an average whatever it is called.
    tracker = (
        "class Tracker:\n"
        "    def update(self, model):\n"
        "        for t, s in zip(self.copy.parameters(), model.parameters()):\n"
        "            t.lerp_(s, 1 - self.decay)\n"
    )
    root = _project(tmp_path, {"blend.py": pipeline, "track.py": tracker})
    assert not _admits(root, "from blend import Blender\nBlender()(x, y, 0.5)\n")
    assert _admits(root, "from track import Tracker\nTracker().update(net)\n")


_AVERAGE_WORDS = """
import copy

import torch


class NormAct(torch.nn.BatchNorm2d):
    def forward(self, x):
        exponential_average_factor = 0.0 if self.momentum is None else self.momentum
        return x * exponential_average_factor


class WeightAverager:
    def __init__(self, model):
        self.average = copy.deepcopy(model)


def moving_average(net1, net2, alpha=1.0):
    for a, b in zip(net1.parameters(), net2.parameters()):
        a.data.mul_(1.0 - alpha).add_(b.data, alpha=alpha)
"""


def test_an_average_word_admits_only_with_weights_read_or_copied(tmp_path):
    root = _project(tmp_path, {"layers.py": _AVERAGE_WORDS})
    # BatchNorm's exponential_average_factor averages no weights
    assert not _admits(root, "from layers import NormAct\n\nNormAct(8)\n")
    assert _admits(root, "from layers import WeightAverager\n\nWeightAverager(m)\n")
    assert _admits(root, "from layers import moving_average\n\nmoving_average(a, b)\n")


def test_a_star_import_of_a_module_that_imports_an_averaging_module_admits(tmp_path):
    root = _project(
        tmp_path,
        {
            "utils/__init__.py": "",
            "utils/averaging.py": "class Tracker:\n    pass\n",
            "utils/general.py": "from . import averaging\n",
        },
    )
    assert _admits(root, "from utils.general import *\n\naveraging.Tracker()\n")
    assert not _admits(root, "from utils.averaging import Tracker\n\nTracker()\n")


def test_only_a_module_whose_code_trains_receives_a_callers_average() -> None:
    from ema_lint.analysis.project.admission import trains

    assert trains(b"def step(model, loss, opt):\n    loss.backward()\n    opt.step()\n")
    assert trains(b"scaler.step(optimizer)\n")  # AMP's step of the optimizer
    assert trains(b"self.optimizers()[0].step()\n")  # a receiver with no name
    assert trains(b"class M:\n    def training_step(self, batch, i):\n        pass\n")
    # A diffusion pipeline's sampling step, a schedule's length, an autograd Function's own
    # backward, and a backward pass only described in prose train nothing.
    assert not trains(b"latents = self.scheduler.step(noise, t, latents).prev_sample\n")
    assert not trains(b"lr_scheduler.step()\npbar.step(1)\n")
    assert not trains(b"def get_schedule(num_training_steps):\n    return num_training_steps\n")
    assert not trains(b"class F(Function):\n    @staticmethod\n    def backward(ctx, g):\n")
    assert not trains(b'def f():\n    """Call loss.backward() first."""\n    # opt.step()\n')


def test_import_lines_are_those_the_line_pattern_finds() -> None:
    import re

    from ema_lint.analysis.project.admission import _IMPORT, import_lines

    text = (
        b"import os\nfrom .ema import (\n    ModelEma,\n)\nx = 'import y'\n"
        b"  from a.b import c as d  # import\nimportant = 1\nif x:\n    import json as j\n"
    )
    found = [m.span() for m in import_lines(text)]
    assert found == [m.span() for m in _IMPORT.finditer(text)]
    assert len(found) == 4
    assert isinstance(next(import_lines(b"import re\n")), re.Match)


def test_a_module_path_component_is_no_reexport() -> None:
    from ema_lint.analysis.project.admission import reexports

    assert reexports(b"from .plots import colors\n", "colors")
    assert reexports(b"from .plots import (\n    Annotator,\n    colors,\n)\n", "colors")
    assert reexports(b"import numpy as colors\n", "colors")
    # ``colors`` names a module here, not what the file imports.
    assert not reexports(b"from matplotlib.colors import LinearSegmentedColormap\n", "colors")
    assert not reexports(b"from colors import palette\n", "colors")
    assert not reexports(b"import colors.palette\n", "colors")


def test_top_definitions_are_those_the_line_pattern_finds() -> None:
    from ema_lint.analysis.project.admission import TOP_DEFINITION, top_definitions

    text = (
        b"class First:\n    def inner(self):\n        pass\n\n"
        b"async  def fetch():\n    pass\n@deco\ndef helper(x):\n    return x\n"
        b"x = 'def not_me()'\nclass Last(Base): ...\n"
    )
    found = [(at, name) for at, name, _ in top_definitions(text)]
    assert found == [(m.start(), m.group(1)) for m in TOP_DEFINITION.finditer(text)]
    assert [c for _, _, c in top_definitions(text)] == [True, False, False, True]
