"""YAML training configs: API objects judged by the same rules, fixed with comments kept."""

from __future__ import annotations

import json
from pathlib import Path

import libcst as cst
import pytest

from ema_lint.analysis.objects.api_calls import ApiCalls
from ema_lint.config import Settings
from ema_lint.diagnostics import Applicability, Edit, Fix
from ema_lint.engine import FileSettings
from ema_lint.rule import Rule
from ema_lint.sources import yaml_config, yaml_nodes

LIGHTNING_BAD = """\
# Lightning CLI: python train.py fit --config this.yaml
seed_everything: 42
trainer:
  max_epochs: 100
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        monitor: val/loss   # keep the best
model:
  class_path: my_project.LitClassifier
  init_args:
    lr: 3.0e-4
    ema:
      class_path: timm.utils.ModelEmaV3
      init_args:
        decay: 0.99        # copied from a tutorial
        use_warmup: true
"""

HYDRA_BAD = """\
defaults:
  - _self_

model:
  # the decay from the paper
  ema_decay: 0.99999

ema:
  _target_: timm.utils.ModelEmaV2
  decay: ${model.ema_decay}
  device: cpu

swa:
  _target_: torch.optim.swa_utils.AveragedModel
  multi_avg_fn: {_target_: torch.optim.swa_utils.get_ema_multi_avg_fn, decay: 0.9}
"""


def _run_json(run, project: Path, *args: str) -> list[dict]:
    return json.loads(run("--output-format", "json", *args, cwd=project).out)["diagnostics"]


def test_lightning_config_is_reported_at_the_value(run, project: Path) -> None:
    (project / "config.yaml").write_text(LIGHTNING_BAD)
    result = run("config.yaml", cwd=project)
    assert result.code == 1
    first = result.out.splitlines()[0]
    assert first.startswith("config.yaml:16:16: EMA101 ") and " 0.99 " in first
    (d,) = _run_json(run, project, "config.yaml")
    assert d["end_location"] == {"line": 16, "column": 20}


def test_lightning_config_fix_keeps_comments_and_layout(run, project: Path) -> None:
    path = project / "config.yaml"
    path.write_text(LIGHTNING_BAD)
    result = run("--fix", "--unsafe-fixes", "config.yaml", cwd=project)
    assert result.code == 0, result.out
    # Only the value changed; the comment stays in its column.
    fixed = LIGHTNING_BAD.replace("decay: 0.99 ", "decay: 0.999")
    assert path.read_text() == fixed
    again = run("--fix", "--unsafe-fixes", "config.yaml", cwd=project)
    assert again.code == 0 and path.read_text() == fixed


def test_hydra_config_follows_interpolations_and_fixes_the_source(run, project: Path) -> None:
    path = project / "train.yaml"
    path.write_text(HYDRA_BAD)
    found = _run_json(run, project, "train.yaml")
    column = HYDRA_BAD.splitlines()[14].index("0.9}") + 1
    assert [(d["location"]["line"], d["location"]["column"]) for d in found] == [
        (6, 14),  # where the interpolated value is written; the use is a related location
        (15, column),
    ]
    assert "(from ${model.ema_decay})" in found[0]["message"]
    assert run("--fix", "--unsafe-fixes", "train.yaml", cwd=project).code == 0
    assert path.read_text() == HYDRA_BAD.replace("ema_decay: 0.99999", "ema_decay: 0.9999").replace(
        "decay: 0.9}", "decay: 0.999}"
    )


@pytest.mark.parametrize(
    "good",
    [
        LIGHTNING_BAD.replace("decay: 0.99 ", "decay: 0.9998"),
        HYDRA_BAD.replace("0.99999", "0.9999").replace("decay: 0.9}", "decay: 0.999}"),
    ],
    ids=["lightning", "hydra"],
)
def test_the_same_files_with_good_settings_are_silent(run, project: Path, good: str) -> None:
    (project / "config.yaml").write_text(good)
    result = run("config.yaml", cwd=project)
    assert result.code == 0, result.out


def test_diff_shows_the_yaml_change(run, project: Path) -> None:
    (project / "config.yaml").write_text(LIGHTNING_BAD)
    result = run("--diff", "--unsafe-fixes", "config.yaml", cwd=project)
    assert result.code == 1
    assert "-        decay: 0.99        # copied from a tutorial" in result.out
    assert "+        decay: 0.999       # copied from a tutorial" in result.out


WELL_KNOWN = """\
train:
  epochs: 10
  ema_decay: 0.99            # judged: an EMA decay
  model_ema_decay: 0.99999   # judged: timm's train.py argument
optimizer:
  use_ema: true
  ema_momentum: 0.9          # judged: Keras' weight on the old average, next to use_ema
"""

WELL_KNOWN_SILENT = """\
teacher:
  ema_decay: 0.996           # a DINO-style teacher: not an evaluation EMA
student_teacher:
  momentum: {ema_decay: 0.99}
misc:
  ema_momentum: 0.01         # no use_ema beside it: either side of the average
sweep:
  ema_decay: [0.99, 0.999]   # a list of candidates
  ema_rate: "0.9999,0.99"    # guided-diffusion's list of rates
model:
  class_path: my_project.Model
  init_args:
    ema_decay: 0.99          # an argument of an unknown class: its meaning is the class's
hydra_model:
  _target_: my_project.Model
  ema_decay: 0.99
decay: 0.5                   # not a well-known key
"""


def test_well_known_keys_where_their_meaning_is_clear(run, project: Path) -> None:
    (project / "params.yml").write_text(WELL_KNOWN)
    found = _run_json(run, project, "params.yml")
    assert [(d["code"], d["location"]["line"], d["location"]["column"]) for d in found] == [
        ("EMA101", 3, 14),
        ("EMA101", 4, 20),
        ("EMA101", 7, 17),
    ]


def test_well_known_keys_stay_silent_where_ambiguous(run, project: Path) -> None:
    (project / "params.yml").write_text(WELL_KNOWN_SILENT)
    result = run("params.yml", cwd=project)
    assert result.code == 0, result.out


def test_a_key_referenced_by_an_object_is_judged_once(run, project: Path) -> None:
    (project / "c.yaml").write_text(HYDRA_BAD)
    found = _run_json(run, project, "c.yaml")
    # model.ema_decay is a well-known key, but the ModelEmaV2 object judges it already.
    assert len([d for d in found if d["location"]["line"] in (6, 10)]) == 1


def test_noqa_comment_on_the_yaml_line(run, project: Path) -> None:
    text = LIGHTNING_BAD.replace("# copied from a tutorial", "# noqa: EMA101")
    (project / "config.yaml").write_text(text)
    assert run("config.yaml", cwd=project).code == 0
    (project / "config.yaml").write_text("# ema-lint: noqa\n" + LIGHTNING_BAD)
    assert run("config.yaml", cwd=project).code == 0


def test_invalid_yaml_is_a_one_line_error_and_the_run_goes_on(run, project: Path) -> None:
    (project / "bad.yaml").write_text("ema:\n  _target_: timm.utils.ModelEmaV2\n  decay: [0.99\n")
    (project / "good.yaml").write_text(LIGHTNING_BAD)
    found = _run_json(run, project, ".")
    assert [(d["path"], d["code"]) for d in found] == [
        ("bad.yaml", "EMA901"),
        ("good.yaml", "EMA101"),
    ]
    assert found[0]["message"].startswith("invalid YAML: ")
    assert "\n" not in found[0]["message"]


def test_yaml_without_any_trigger_is_never_parsed(run, project: Path) -> None:
    (project / "ci.yml").write_text("on: [push]\njobs: {build: [unclosed\n")
    assert run("ci.yml", cwd=project).code == 0


def test_without_pyyaml_a_config_is_an_error_never_a_pass(run, project: Path, monkeypatch) -> None:
    # PyYAML is a dependency: a broken install that lacks it must not print "All checks passed!"
    monkeypatch.setattr(yaml_nodes, "_yaml", lambda: None)
    (project / "a.yaml").write_text(LIGHTNING_BAD)
    (project / "ci.yml").write_text("on: [push]\n")
    result = run(".", cwd=project)
    assert result.code == 1 and "All checks passed!" not in result.out
    assert "a.yaml:1:1: EMA901 not read: PyYAML is not installed (pip install PyYAML)" in result.out
    assert "ci.yml" not in result.out


def test_json_output_has_text_edits_in_yaml_coordinates(run, project: Path) -> None:
    (project / "config.yaml").write_text(LIGHTNING_BAD)
    (d,) = _run_json(run, project, "--unsafe-fixes", "config.yaml")
    (edit,) = d["fix"]["edits"]
    assert edit == {
        "location": {"line": 16, "column": 16},
        "end_location": {"line": 16, "column": 20},
        "content": "0.999",
    }


def test_hydra_positional_args_and_flow_style(run, project: Path) -> None:
    text = "ema: {_target_: timm.utils.ModelEmaV2, _args_: [null, 0.99]}  # positional\n"
    (project / "c.yaml").write_text(text)
    found = _run_json(run, project, "c.yaml")
    assert [(d["location"]["line"], d["location"]["column"]) for d in found] == [(1, 55)]
    run("--fix", "--unsafe-fixes", "c.yaml", cwd=project)
    assert (project / "c.yaml").read_text() == text.replace("0.99]", "0.999]")


# The mechanism is rule-agnostic: a rule that renames a keyword and one that rewrites a
# value are mapped back without any code of theirs in the YAML source.
class RenameKeyword(Rule):
    """Test rule: ``swa_lr`` is not a keyword of ModelEmaV2 (stands for EMA405)."""

    code = "EMA998"
    name = "test-rename-keyword"
    summary = "test"
    triggers = (b"ModelEmaV2",)

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.get(ApiCalls).bound(node) is None:
            return
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "decay_rate":
                new = arg.with_changes(keyword=cst.Name("decay"))
                self.report(
                    arg, "decay_rate is not an argument", Fix.safe("rename", Edit.replace(arg, new))
                )


class QuoteString(Rule):
    """Test rule: rewrites a string argument (stands for a value fix of another type)."""

    code = "EMA997"
    name = "test-quote-string"
    summary = "test"
    triggers = (b"ModelEmaV2",)

    def visit_Call(self, node: cst.Call) -> None:
        bound = self.ctx.get(ApiCalls).bound(node)
        if bound is None:
            return
        device = bound.value("device")
        if isinstance(device, cst.SimpleString) and device.evaluated_value == "gpu":
            new = cst.SimpleString('"cuda"')
            self.report(
                device,
                "no such device",
                Fix(Applicability.SAFE, (Edit.replace(device, new),), "cuda"),
            )


def _settings(*rules: type[Rule]) -> FileSettings:
    return FileSettings(rules=rules)


def test_any_rule_key_rename_and_value_fixes_map_back() -> None:
    text = """\
ema:
  _target_: timm.utils.ModelEmaV2
  decay_rate: 0.999   # wrong name
  device: gpu         # a typo
"""
    settings = _settings(RenameKeyword, QuoteString)
    outcome = yaml_config.SOURCE.lint(text.encode(), "c.yaml", settings)
    assert [(d.code, d.line, d.column, d.end.column) for d in outcome.diagnostics] == [
        ("EMA998", 3, 3, 13),
        ("EMA997", 4, 11, 14),
    ]
    fixed = yaml_config.SOURCE.fix(text.encode(), "c.yaml", settings)
    assert fixed.applied == 2
    assert fixed.fixed.decode() == text.replace("decay_rate: 0.999", "decay: 0.999").replace(
        "device: gpu ", "device: cuda"
    )
    assert fixed.diagnostics == []


def test_a_fix_that_is_not_a_scalar_edit_is_reported_without_fix() -> None:
    class RemoveCall(Rule):
        code = "EMA996"
        name = "test-remove"
        summary = "test"
        triggers = (b"ModelEmaV2",)

        def visit_Call(self, node: cst.Call) -> None:
            if self.ctx.get(ApiCalls).bound(node) is not None:
                statement = self.ctx.index.statement(node)
                self.report(node, "remove it", Fix.safe("remove", Edit.remove(statement)))

    text = b"ema:\n  _target_: timm.utils.ModelEmaV2\n  decay: 0.999\n"
    outcome = yaml_config.SOURCE.lint(text, "c.yaml", _settings(RemoveCall))
    (d,) = outcome.diagnostics
    assert (d.line, d.column) == (2, 13) and d.fix is None
    assert yaml_config.SOURCE.fix(text, "c.yaml", _settings(RemoveCall)).fixed is None


@pytest.mark.parametrize(
    ("value", "old", "expected"),
    [
        (0.999, "0.99", "0.999"),
        (1e-05, "1e-4", "1.0e-05"),
        (True, "false", "true"),
        ("cuda", "gpu", "cuda"),
        ("cuda", "'gpu'", "'cuda'"),
        ("yes", "x", '"yes"'),
        ("a b: c", "x", '"a b: c"'),
    ],
)
def test_yaml_scalar_text(value, old: str, expected: str) -> None:
    assert yaml_config.yaml_scalar(value, old) == expected


def test_api_check_and_fix_read_yaml() -> None:
    import ema_lint

    found = ema_lint.check(LIGHTNING_BAD, path="config.yaml")
    assert [(d.code, d.line, d.column) for d in found] == [("EMA101", 16, 16)]
    result = ema_lint.fix(LIGHTNING_BAD, path="config.yaml", unsafe=True)
    assert result.applied == 1 and "decay: 0.999 " in result.source


def test_default_settings_run_on_yaml() -> None:
    settings = Settings(isolated=True).for_file(None)
    outcome = yaml_config.SOURCE.lint(HYDRA_BAD.encode(), "c.yaml", settings)
    assert {d.code for d in outcome.diagnostics} == {"EMA101"}
