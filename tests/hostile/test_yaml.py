"""YAML that once ended the run, and YAML as Hydra and Lightning write it.

A merge key raised a traceback that lost every other file's findings; an alias bomb took
minutes and gigabytes; a config group file (``_target_`` at the top) was never checked.
Each refusal is one EMA901 line and the run goes on; nothing is ever constructed from a tag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ema_lint.sources import yaml_nodes

PY_FINDING = "from timm.utils import ModelEmaV2\nema = ModelEmaV2(model, decay=0.99)\n"


def _found(run, project: Path, *args: str) -> list[tuple[str, str, int, int]]:
    result = run("--output-format", "json", *args, cwd=project)
    assert "Traceback" not in result.out + result.err
    document = json.loads(result.out)
    return [
        (d["path"], d["code"], d["location"]["line"], d["location"]["column"])
        for d in document["diagnostics"]
    ]


def _bomb(levels: int, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append("ema: {_target_: timm.utils.ModelEmaV2, decay: 0.99}")
    return "\n".join(lines) + "\n"


def test_merge_keys_are_resolved_and_the_other_files_are_still_reported(run, project) -> None:
    (project / "train.py").write_text(PY_FINDING)
    (project / "conf.yaml").write_text(
        "base: &base\n"
        "  _target_: timm.utils.ModelEmaV2\n"
        "  decay: 0.999\n"
        "ema:\n"
        "  <<: *base\n"
        "  decay: 0.99   # overrides the base\n"
        "twin: {<<: *base}\n"
    )
    assert _found(run, project, ".") == [
        ("conf.yaml", "EMA101", 6, 10),
        ("train.py", "EMA101", 2, 31),
    ]


def test_a_merged_value_is_reported_and_fixed_where_it_is_written(run, project) -> None:
    text = (
        "defaults: &defaults {_target_: timm.utils.ModelEmaV2, decay: 0.99}\n"
        "ema:\n"
        "  <<: [*defaults, {device: cpu}]\n"
    )
    (project / "conf.yaml").write_text(text)
    assert _found(run, project, "conf.yaml") == [("conf.yaml", "EMA101", 1, 62)]
    run("--fix", "--unsafe-fixes", "conf.yaml", cwd=project)
    assert (project / "conf.yaml").read_text() == text.replace("0.99}", "0.999}")


def test_an_alias_bomb_is_one_line_and_the_run_goes_on(run, project: Path) -> None:
    (project / "train.py").write_text(PY_FINDING)
    (project / "bomb.yaml").write_text(_bomb(6))  # 9**7 nodes once expanded
    result = run("bomb.yaml", "train.py", cwd=project)
    assert "Traceback" not in result.out + result.err
    [line] = [x for x in result.out.splitlines() if "bomb.yaml" in x]
    assert line.startswith(
        "bomb.yaml:6:5: EMA901 not read: more than 100,000 nodes once its aliases"
    )
    assert "train.py:2:31: EMA101" in result.out


def test_a_small_alias_graph_is_read(run, project: Path) -> None:
    (project / "ok.yaml").write_text(_bomb(3))  # 9**4 nodes: far under the cap
    assert _found(run, project, "ok.yaml") == [("ok.yaml", "EMA101", 5, 47)]


@pytest.mark.parametrize(
    "text",
    [
        "a: &a [*a]\nema: {_target_: timm.utils.ModelEmaV2, decay: 0.99}\n",
        "a: &a {<<: *a}\nema: {_target_: timm.utils.ModelEmaV2, decay: 0.99}\n",
        "a: &a {b: {c: *a}}\nema: {_target_: timm.utils.ModelEmaV2, decay: 0.99}\n",
    ],
    ids=["sequence", "merge", "nested"],
)
def test_a_recursive_alias_is_one_line(run, project: Path, text: str) -> None:
    (project / "loop.yaml").write_text(text)
    result = run("loop.yaml", cwd=project)
    assert result.code == 1 and "Traceback" not in result.out + result.err
    [line] = [x for x in result.out.splitlines() if "EMA9" in x]
    assert "EMA901 not read: an alias refers to the node that holds it" in line


def test_a_merge_key_that_is_not_a_mapping_is_one_line(run, project: Path) -> None:
    (project / "m.yaml").write_text("a: 1\nema:\n  <<: [1, 2]\n  _target_: x.ModelEmaV2\n")
    assert _found(run, project, "m.yaml") == [("m.yaml", "EMA901", 3, 8)]


def test_a_config_over_the_size_cap_is_refused_without_reading_it(run, project) -> None:
    filler = "".join(f"k{i}: {i}\n" for i in range(yaml_nodes.MAX_YAML_BYTES // 8))
    (project / "big.yaml").write_text("ema: {_target_: timm.utils.ModelEmaV2}\n" + filler)
    (project / "train.py").write_text(PY_FINDING)
    result = run("big.yaml", "train.py", cwd=project)
    assert "big.yaml:1:1: EMA901 not read: the file is over 1 MB" in result.out
    assert "train.py:2:31: EMA101" in result.out


def test_python_tags_are_never_constructed(run, project: Path, tmp_path: Path) -> None:
    marker = tmp_path / "constructed"
    (project / "conf.yaml").write_text(
        f"run: !!python/object/apply:os.system ['touch {marker}']\n"
        f"other: !!python/object/new:pathlib.Path ['{marker}']\n"
        "name: !!python/name:os.system\n"
        "ema:\n"
        "  _target_: timm.utils.ModelEmaV2\n"
        "  decay: 0.99\n"
        "  device: !!python/object/apply:os.getcwd []\n"
    )
    assert _found(run, project, "--fix", "--unsafe-fixes", "conf.yaml") == []
    assert not marker.exists()
    assert "decay: 0.999\n" in (project / "conf.yaml").read_text()


def test_a_config_group_file_is_one_object(run, project: Path) -> None:
    # conf/ema/default.yaml of a Hydra app: the whole file is what instantiate() builds.
    group = project / "conf" / "ema"
    group.mkdir(parents=True)
    text = "# @package _global_\n_target_: timm.utils.ModelEmaV3\ndecay: 0.99  # from a paper\n"
    (group / "default.yaml").write_text(text)
    (project / "model.yaml").write_text(
        "class_path: timm.utils.ModelEmaV3\ninit_args:\n  decay: 0.9\n"
    )
    assert _found(run, project, ".") == [
        ("conf/ema/default.yaml", "EMA101", 3, 8),
        ("model.yaml", "EMA101", 3, 10),
    ]
    run("--fix", "--unsafe-fixes", "conf/ema/default.yaml", cwd=project)
    assert (group / "default.yaml").read_text() == text.replace("0.99 ", "0.999")


def test_hydra_defaults_interpolations_and_documents_are_read(run, project: Path) -> None:
    text = (
        "defaults:\n"
        "  - _self_\n"
        "  - model: resnet\n"
        "  - override hydra/launcher: joblib\n"
        "  - optional ema: ${oc.env:EMA_PRESET,default}\n"
        "run_dir: ${hydra:runtime.cwd}/outputs/${now:%Y-%m-%d}\n"
        "train:\n"
        "  lr: 1e-4\n"
        "  ema_decay: 0.99\n"
        "  warmup: ${..lr}\n"
        "ema:\n"
        "  _target_: timm.utils.ModelEmaV2\n"
        "  decay: ${train.ema_decay}\n"
        "  device: ${oc.select:device,cpu}\n"
        "---\n"
        "# a second document\n"
        "swa_ema:\n"
        "  _target_: timm.utils.ModelEmaV2\n"
        "  decay: 0.9\n"
    )
    (project / "config.yaml").write_text(text)
    assert _found(run, project, "config.yaml") == [
        ("config.yaml", "EMA101", 9, 14),  # where the value is written; the use related
        ("config.yaml", "EMA101", 19, 10),
    ]
    run("--fix", "--unsafe-fixes", "config.yaml", cwd=project)
    fixed = (project / "config.yaml").read_text()
    assert fixed == text.replace("ema_decay: 0.99", "ema_decay: 0.999").replace(
        "decay: 0.9\n", "decay: 0.999\n"
    )


def test_omegaconf_reads_exponents_without_a_dot_as_floats(run, project: Path) -> None:
    (project / "c.yaml").write_text("ema:\n  _target_: timm.utils.ModelEmaV2\n  decay: 9e-1\n")
    assert _found(run, project, "c.yaml") == [("c.yaml", "EMA101", 3, 10)]


def test_a_character_yaml_forbids_is_one_line_at_its_place(run, project: Path) -> None:
    (project / "c.yaml").write_text("ema:\n  _target_: timm.utils.ModelEmaV2\n  decay: 0.9\x07\n")
    result = run("c.yaml", cwd=project)
    assert "c.yaml:3:13: EMA901 invalid YAML: character '\\x07' is not allowed" in result.out
