"""Notebooks: linted cell by cell as one module, reported by cell, fixed in place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ema_lint.config import Settings
from ema_lint.sources import notebook as nbsource
from tests.sources.notebooks import TRAINING, code, dumps, lines, markdown, notebook

IMPORT = "from timm.utils import ModelEmaV2\n"


def _write(folder: Path, document: dict, name: str = "train.ipynb", **style) -> Path:
    path = folder / name
    path.write_text(dumps(document, **style), encoding="utf-8")
    return path


def _json(run, *args, cwd: Path) -> dict:
    return json.loads(run("--output-format", "json", *args, cwd=cwd).out)


def test_a_bug_in_the_third_cell_is_reported_with_its_cell_and_line(run, project: Path) -> None:
    _write(project, TRAINING)
    result = run("train.ipynb", cwd=project)
    assert result.code == 1
    assert result.out.splitlines()[0].startswith(
        "train.ipynb:cell 3:4:31: EMA101 EMA decay 0.99 averages over about 100 updates"
    )
    (d,) = _json(run, "train.ipynb", cwd=project)["diagnostics"]
    assert (d["cell"], d["location"], d["end_location"]) == (
        3,
        {"line": 4, "column": 31},
        {"line": 4, "column": 35},
    )
    assert d["noqa_line"] == 4


def test_fix_changes_only_that_cells_source(run, project: Path) -> None:
    path = _write(project, TRAINING)
    before_text = path.read_text(encoding="utf-8")
    result = run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    assert result.code == 0, result.out
    after_text = path.read_text(encoding="utf-8")
    before, after = json.loads(before_text), json.loads(after_text)
    assert after["cells"][2]["source"] == lines(
        "model = torch.nn.Linear(4, 2)\n"
        "!nvidia-smi\n"
        "# keep an average of the weights\n"
        "ema = ModelEmaV2(model, decay=0.999)\n"
        "print(ema)"
    )
    after["cells"][2]["source"] = before["cells"][2]["source"]
    assert after == before
    # Byte for byte, the rest of the file is untouched: one line differs.
    changed = [
        (a, b)
        for a, b in zip(before_text.splitlines(True), after_text.splitlines(True), strict=True)
        if a != b
    ]
    assert changed == [
        (
            '    "ema = ModelEmaV2(model, decay=0.99)\\n",\n',
            '    "ema = ModelEmaV2(model, decay=0.999)\\n",\n',
        )
    ]
    again = run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    assert again.code == 0 and path.read_text(encoding="utf-8") == after_text


def test_fixed_notebook_is_still_a_valid_notebook(run, project: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    path = _write(project, TRAINING)
    run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    nbformat.validate(nbformat.reads(path.read_text(encoding="utf-8"), as_version=4))


@pytest.mark.parametrize(
    "style",
    [
        {"indent": 2, "sort_keys": False},
        {"indent": 4, "ensure_ascii": True},
        {"indent": None, "separators": (",", ":")},
        {"indent": "\t"},
    ],
    ids=["indent-2", "ascii-escaped", "compact", "tabs"],
)
def test_fix_keeps_the_files_json_style(run, project: Path, style: dict) -> None:
    document = notebook(
        code(
            lines(IMPORT + "ema = ModelEmaV2(model, decay=0.99)  # épreuve\n"), [nbsource_output()]
        )
    )
    path = _write(project, document, **style)
    before = path.read_text(encoding="utf-8")
    run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    after = path.read_text(encoding="utf-8")
    expected = json.loads(before)
    expected["cells"][0]["source"][1] = expected["cells"][0]["source"][1].replace("0.99)", "0.999)")
    assert json.loads(after) == expected
    # Serialized exactly as the same tool would have written the fixed document.
    options = {"indent": 1, "sort_keys": True, "ensure_ascii": False, **style}
    assert after == json.dumps(expected, **options) + "\n"


def nbsource_output() -> dict:
    return {"name": "stdout", "output_type": "stream", "text": ["ok ✓\n"]}


def test_source_as_one_string_and_no_final_newline_are_kept(run, project: Path) -> None:
    document = notebook(code(IMPORT + "ema = ModelEmaV2(model, decay=0.99)"))
    path = project / "train.ipynb"
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")  # no final newline
    run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    text = path.read_text(encoding="utf-8")
    assert not text.endswith("\n")
    assert json.loads(text)["cells"][0]["source"] == IMPORT + "ema = ModelEmaV2(model, decay=0.999)"


def test_names_from_earlier_cells_resolve_later(run, project: Path) -> None:
    document = notebook(
        code(lines("from timm.utils import ModelEmaV2 as Ema\n")),
        markdown("Decay:"),
        code(lines("DECAY = 0.99\n")),
        code(lines("ema = Ema(model, decay=DECAY)\n")),
    )
    _write(project, document)
    (d,) = _json(run, "train.ipynb", cwd=project)["diagnostics"]
    # Reported where the literal is written (cell 3), the use in cell 4 being related.
    assert (d["cell"], d["location"]["line"]) == (3, 1)
    assert "(from DECAY)" in d["message"]
    run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    cells = json.loads((project / "train.ipynb").read_text())["cells"]
    assert cells[2]["source"] == ["DECAY = 0.999\n"]
    assert cells[3]["source"] == ["ema = Ema(model, decay=DECAY)\n"]


def test_ipython_syntax_is_masked_and_kept(run, project: Path) -> None:
    source = (
        "%load_ext autoreload\n"
        "files = !ls data\n"
        "ModelEmaV2?\n"
        "??ModelEmaV2\n"
        "for i in range(2):\n"
        "    %time f(i)\n"
        "ema = ModelEmaV2(model, decay=0.99)\n"
    )
    _write(project, notebook(code(lines(IMPORT)), code(lines(source))))
    result = run("--fix", "--unsafe-fixes", "train.ipynb", cwd=project)
    assert result.code == 0, result.out
    cells = json.loads((project / "train.ipynb").read_text())["cells"]
    assert "".join(cells[1]["source"]) == source.replace("0.99)", "0.999)")


def test_cell_magics(run, project: Path) -> None:
    document = notebook(
        code(lines(IMPORT)),
        code(lines("%%bash\nema = ModelEmaV2(model, decay=0.99)\n")),
        code(lines("%%time\nema = ModelEmaV2(model, decay=0.99)\n")),
        code(lines("%%capture out\n\nema = ModelEmaV2(model, decay=0.99)\n")),
    )
    _write(project, document)
    found = [
        (d["cell"], d["location"]["line"])
        for d in _json(run, "train.ipynb", cwd=project)["diagnostics"]
    ]
    assert found == [(3, 2), (4, 3)]


def test_valid_python_is_never_masked() -> None:
    # A line that looks like help syntax inside a string is left alone when the cell compiles.
    text = 's = """\n%not a magic\nwhat?\n"""\nx = 1\n'
    assert nbsource.mask(1, text).masked == text


def test_a_cell_that_does_not_parse_is_reported_and_the_rest_is_checked(run, project: Path) -> None:
    document = notebook(
        code(lines(IMPORT)),
        code(lines("def broken(:\n    pass\n")),
        code(lines("ema = ModelEmaV2(model, decay=0.99)\n")),
    )
    _write(project, document)
    found = _json(run, "train.ipynb", cwd=project)["diagnostics"]
    assert [(d["code"], d["cell"], d["location"]["line"]) for d in found] == [
        ("EMA901", 2, 1),
        ("EMA101", 3, 1),
    ]
    assert found[0]["message"].startswith("cannot parse cell 2:")


@pytest.mark.parametrize(
    ("text", "message", "line"),
    [
        ('{"cells": [\n  {"cell_type": "code",\n}', "invalid notebook JSON: ", 3),
        ('{"nbformat": 4}', "not a Jupyter notebook: no 'cells' list", 1),
        ('{"worksheets": [], "nbformat": 3}', "nbformat 3 notebooks are not supported", 1),
        ('{"cells": [{"cell_type": "code", "source": 3}]}', "cell 1: 'source' must be", 1),
    ],
)
def test_unreadable_notebooks_are_one_line_errors(run, project: Path, text, message, line) -> None:
    (project / "bad.ipynb").write_text(text)
    _write(project, notebook(code(lines(IMPORT + "ema = ModelEmaV2(model, decay=0.99)\n"))))
    result = run("--output-format", "json", ".", cwd=project)
    found = json.loads(result.out)["diagnostics"]
    assert [d["code"] for d in found] == ["EMA901", "EMA101"]
    assert found[0]["message"].startswith(message)
    assert found[0]["location"]["line"] == line
    assert run("--fix", "--unsafe-fixes", "bad.ipynb", cwd=project).code == 1
    assert (project / "bad.ipynb").read_text() == text


def test_undecodable_notebook(run, project: Path) -> None:
    (project / "bad.ipynb").write_bytes(b'{"cells": [\n"\xff"]}')
    (d,) = _json(run, "bad.ipynb", cwd=project)["diagnostics"]
    assert d["code"] == "EMA901" and d["location"] == {"line": 2, "column": 2}


def test_notebooks_of_other_languages_are_skipped(run, project: Path) -> None:
    document = notebook(code(lines(IMPORT + "ema = ModelEmaV2(model, decay=0.99)\n")), language="R")
    _write(project, document)
    assert run("train.ipynb", cwd=project).code == 0


def test_noqa_in_a_cell(run, project: Path) -> None:
    document = notebook(
        code(lines(IMPORT)),
        code(lines("ema = ModelEmaV2(model, decay=0.99)  # noqa: EMA101\n")),
    )
    _write(project, document)
    assert run("train.ipynb", cwd=project).code == 0


def test_directories_include_notebooks_and_text_edits_map_to_cells(run, project: Path) -> None:
    (project / "nbs").mkdir()
    _write(project / "nbs", TRAINING)
    (project / "nbs" / ".ipynb_checkpoints").mkdir()
    document = _json(run, "--unsafe-fixes", ".", cwd=project)
    (d,) = document["diagnostics"]
    assert d["path"].endswith("train.ipynb")
    (edit,) = d["fix"]["edits"]
    assert edit["location"]["line"] == edit["end_location"]["line"] == 4
    text = TRAINING["cells"][2]["source"][3]
    start, end = edit["location"]["column"] - 1, edit["end_location"]["column"] - 1
    assert text[:start] + edit["content"] + text[end:] == text.replace("0.99)", "0.999)")


def test_stdin_notebook(run, project: Path) -> None:
    data = dumps(TRAINING).encode()
    result = run("-", "--stdin-filename", "train.ipynb", stdin=data, cwd=project)
    assert result.out.startswith("train.ipynb:cell 3:4:31: EMA101")
    fixed = run(
        "-", "--stdin-filename", "train.ipynb", "--fix", "--unsafe-fixes", stdin=data, cwd=project
    )
    assert (
        json.loads(fixed.out)["cells"][2]["source"][3] == "ema = ModelEmaV2(model, decay=0.999)\n"
    )


def test_diff_shows_cells(run, project: Path) -> None:
    path = _write(project, TRAINING)
    before = path.read_text()
    result = run("--diff", "--unsafe-fixes", "train.ipynb", cwd=project)
    assert result.code == 1
    assert result.out.splitlines()[:2] == ["--- train.ipynb:cell 3", "+++ train.ipynb:cell 3"]
    assert "+ema = ModelEmaV2(model, decay=0.999)" in result.out
    assert path.read_text() == before


def test_an_added_import_above_the_first_marker_goes_to_the_first_cell() -> None:
    cells = [nbsource.mask(1, "x = 1\n"), nbsource.mask(3, "y = 2")]
    joined = nbsource.join(cells)
    fixed = "import torch\n" + joined.text
    assert nbsource.split(joined, fixed) == {1: "import torch\nx = 1\n", 3: "y = 2"}
    assert nbsource.split(joined, joined.text.replace("# ema-lint-cell: 3", "")) is None


def test_api_check_reads_notebooks() -> None:
    import ema_lint

    found = ema_lint.check(dumps(TRAINING), path="train.ipynb")
    assert [(d.code, d.cell, d.line) for d in found] == [("EMA101", 3, 4)]
    result = ema_lint.fix(dumps(TRAINING), path="train.ipynb", unsafe=True)
    assert result.applied == 1
    assert json.loads(result.source)["cells"][2]["source"][3].endswith("decay=0.999)\n")


_PY_LINE = st.sampled_from(
    ["x = 1", "y = x + 2", "if x:", "    z = 3", "def f():", "    return 1", "# comment", ""]
)
_MAGIC_LINE = st.sampled_from(["%matplotlib inline", "!ls", "out = !pwd", "f?", "%time g()"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(_PY_LINE, _MAGIC_LINE), max_size=6), min_size=1, max_size=4))
def test_masking_keeps_every_line_where_it_was(cells_lines: list[list[str]]) -> None:
    cells = [
        nbsource.mask(i + 1, "".join(f"{x}\n" for x in ls)) for i, ls in enumerate(cells_lines)
    ]
    joined = nbsource.join(cells)
    joined_lines = joined.text.splitlines()
    for cell, original in zip(cells, cells_lines, strict=True):
        assert nbsource.unmask(cell, cell.masked) == cell.text
        for number, line in enumerate(original, start=1):
            got = joined_lines[cell.start + number - 2]
            assert got == line or "ema-lint-masked-line" in got
            located, position = joined.locate(nbsource.Position(cell.start + number - 1, 3))
            assert located is cell and position == nbsource.Position(number, 3)


def test_settings_type_is_the_engines() -> None:
    # The source runs with the same per-file settings as Python files.
    assert nbsource.SOURCE.lint(
        b"{}", "x.ipynb", Settings(isolated=True).for_file(None)
    ).diagnostics


def test_pre_commit_hooks_pass_notebooks() -> None:
    identify = pytest.importorskip("identify.identify")
    import yaml

    root = Path(__file__).resolve().parents[2]
    hooks = yaml.safe_load((root / ".pre-commit-hooks.yaml").read_text())
    assert "jupyter" in identify.tags_from_filename("train.ipynb")
    for hook in hooks:
        assert {"python", "pyi", "jupyter"} <= set(hook["types_or"]), hook["id"]
