"""Which files the pre-filter rejected are still parsed because of what they import: only a
name the file takes from the project whose definition is about averaging admits it."""

from __future__ import annotations

from pathlib import Path

from ema_lint.analysis.project.admission import imports_averaging

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
    return imports_averaging(str(path), importer.encode())


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
