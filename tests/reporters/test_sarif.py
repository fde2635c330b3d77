"""SARIF output is valid SARIF 2.1.0 (the official schema) and carries rules, regions, fixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ema_lint import registry
from tests.samples import BAD, GOOD

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "sarif-schema-2.1.0.json").read_text("utf-8")
)


def _validate(document: dict) -> None:
    validator_class = jsonschema.validators.validator_for(SCHEMA)
    validator_class.check_schema(SCHEMA)
    errors = sorted(validator_class(SCHEMA).iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:5])


def _sarif(run, project: Path, *args: str) -> dict:
    result = run("--output-format", "sarif", *args, cwd=project)
    return json.loads(result.out)


def test_findings_with_fixes_validate_against_the_schema(run, project: Path) -> None:
    (project / "train.py").write_text(BAD)
    document = _sarif(run, project, "train.py")
    _validate(document)
    (result,) = document["runs"][0]["results"]
    assert result["ruleId"] == "EMA101"
    rules = document["runs"][0]["tool"]["driver"]["rules"]
    assert rules[result["ruleIndex"]]["id"] == "EMA101"
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"] == {"uri": "train.py", "uriBaseId": "%SRCROOT%"}
    assert location["region"] == {"startLine": 3, "startColumn": 31, "endLine": 3, "endColumn": 35}
    (fix,) = result["fixes"]
    (replacement,) = fix["artifactChanges"][0]["replacements"]
    region = replacement["deletedRegion"]
    assert region["startLine"] == region["endLine"] == 3
    line = BAD.splitlines()[2]
    fixed = (
        line[: region["startColumn"] - 1]
        + replacement["insertedContent"]["text"]
        + line[region["endColumn"] - 1 :]
    )
    assert fixed == "ema = ModelEmaV2(model, decay=0.999)"


def test_every_rule_has_metadata_and_a_help_uri(run, project: Path) -> None:
    (project / "train.py").write_text(GOOD)
    document = _sarif(run, project, "train.py")
    _validate(document)
    rules = document["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in registry.all_rules()]
    for rule in rules:
        assert rule["helpUri"].endswith(f"/rules/{rule['id']}/")
        assert rule["shortDescription"]["text"]
        assert rule["help"]["markdown"].startswith(f"# {rule['id']}")
    assert document["runs"][0]["results"] == []


def test_errors_become_notifications_and_the_document_stays_valid(run, project: Path) -> None:
    (project / "broken.py").write_text("from timm.utils import ModelEmaV2\nx = (\n")
    document = _sarif(run, project, "broken.py", "missing.py")
    _validate(document)
    invocation = document["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert any(
        "missing.py" in n["message"]["text"] for n in invocation["toolExecutionNotifications"]
    )
    assert [r["ruleId"] for r in document["runs"][0]["results"]] == ["EMA901"]


def test_absolute_paths_outside_the_folder_are_file_uris(
    run, project: Path, tmp_path_factory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "train.py"
    elsewhere.write_text(BAD)
    document = _sarif(run, project, str(elsewhere))
    _validate(document)
    location = document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].startswith("file:///")
    assert "uriBaseId" not in location["artifactLocation"]


def test_notebook_findings_validate_and_name_their_cell(run, project: Path) -> None:
    from tests.sources.notebooks import TRAINING, dumps

    (project / "train.ipynb").write_text(dumps(TRAINING))
    document = _sarif(run, project, "--unsafe-fixes", "train.ipynb")
    _validate(document)
    (result,) = document["runs"][0]["results"]
    assert result["properties"]["cell"] == 3
    assert result["message"]["text"].startswith("cell 3, line 4: EMA decay 0.99")
    # A cell's edit does not address the file's lines: no artifact change is offered.
    assert "fixes" not in result
