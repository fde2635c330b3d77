"""What the project model summarises, and what it leaves alone: the byte gates that keep a
large library from being summarised module by module (a lookup wants one kind of record,
and only a definition holding evidence of that kind is summarised; a caller is scanned for a
step helper only when it names one of the project's possible step helpers)."""

from __future__ import annotations

from pathlib import Path

from ema_lint.analysis.project import model
from ema_lint.analysis.project.model import (
    AVERAGING,
    EVALUATION,
    STEP,
    averaging_evidence,
    defines_relevant,
    reexport_relevant,
    step_helper_names,
)

_MODELS = b'''
import torch


class VisionNet(torch.nn.Module):
    """A model; "global average pooling" in its docs, a pooling option named avg."""

    def __init__(self, global_pool="avg"):
        super().__init__()
        self.pool = global_pool

    @torch.no_grad()
    def init_weights(self):
        pass


def train_step(model, optimizer, loss):
    loss.backward()
    optimizer.step()


def evaluate(model, loader):
    return [model(x) for x in loader]
'''

_HELPERS = b"""
import copy


class Scaler:
    def __call__(self, loss, optimizer):
        loss.backward()
        optimizer.step()


class Smoother:
    def __init__(self, model, decay=0.999):
        self.avg_model = copy.deepcopy(model)


def lerp_weights(target_net, net, tau):
    for t, p in zip(target_net.parameters(), net.parameters()):
        t.mul_(1 - tau).add_(p, alpha=tau)
"""


def test_a_model_class_is_no_averaging_lookup_however_its_module_reads() -> None:
    assert not defines_relevant(_MODELS, "VisionNet", frozenset({AVERAGING}))
    assert not defines_relevant(_MODELS, "VisionNet", frozenset({STEP}))
    assert not defines_relevant(_MODELS, "VisionNet", frozenset({EVALUATION}))  # a class
    assert defines_relevant(_MODELS, "train_step", frozenset({STEP}))
    assert not defines_relevant(_MODELS, "train_step", frozenset({AVERAGING}))
    assert defines_relevant(_MODELS, "evaluate", frozenset({EVALUATION}))


def test_averaging_evidence_is_in_the_code_names() -> None:
    assert defines_relevant(_HELPERS, "Smoother", frozenset({AVERAGING}))  # avg_model
    assert defines_relevant(_HELPERS, "lerp_weights", frozenset({AVERAGING}))  # target_net
    assert not defines_relevant(_HELPERS, "Scaler", frozenset({AVERAGING}))
    assert averaging_evidence(b"self.shadow[name].mul_(d)")
    assert not averaging_evidence(b"pool = 'avg'  # an average pool\n")
    assert averaging_evidence(b"class Mine(ModelEmaV2):\n    pass\n")  # a table API


def _project(tmp_path: Path, files: dict[str, bytes]) -> Path:
    (tmp_path / "setup.cfg").write_text("")
    for name, data in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    model.forget()
    return tmp_path


def test_step_helper_names_are_the_possible_step_helpers(tmp_path: Path) -> None:
    root = _project(tmp_path, {"models.py": _MODELS, "helpers.py": _HELPERS})
    assert step_helper_names(str(root)) == {b"Scaler", b"train_step"}


def test_a_reexport_is_followed_by_bytes_to_its_definition(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            "pkg/__init__.py": b"from .models import VisionNet\nfrom .helpers import Smoother\n",
            "pkg/models.py": _MODELS,
            "pkg/helpers.py": _HELPERS,
        },
    )
    init = root / "pkg" / "__init__.py"
    data = init.read_bytes()
    averaging = frozenset({AVERAGING})
    assert not reexport_relevant(str(init), data, "VisionNet", averaging)
    assert reexport_relevant(str(init), data, "Smoother", averaging)
    # A name the byte reader cannot follow (an alias) is left to the summary.
    aliased = b"from .models import VisionNet as Net\n"
    assert reexport_relevant(str(init), aliased, "Net", averaging)


def test_a_module_named_only_in_a_comment_is_no_caller(tmp_path: Path) -> None:
    import libcst as cst

    from ema_lint.analysis.syntax.context import FileContext

    helper = b"def train(model, model_ema):\n    model_ema.update(model)\n"
    copy = b"# Copied from helpers.train\ndef train(model, model_ema):\n    pass\n"
    caller = b"from helpers import train\n\ntrain(net, model_ema)\n"
    root = _project(tmp_path, {"helpers.py": helper, "copy.py": copy, "main.py": caller})
    path = str(root / "helpers.py")
    link = model.ProjectLink(FileContext(cst.parse_module(helper), path))
    assert [p for p, _ in link._importers("train")] == [str(root / "main.py")]
