"""Every multi-file project fixture, through the command and through flake8: the findings
are exactly the expected ones in every file, and fixes edit only the files where the bugs
are (the helper module is never rewritten for a finding in its importer)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from tests.fixture_cases import ROOT, ProjectCase, all_projects

PROJECTS = all_projects()


def _cli(root: Path, *extra: str, cwd: Path = ROOT) -> list[dict]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ema_lint",
            "check",
            "--no-cache",
            "--output-format",
            "json",
            "--exit-zero",
            *extra,
            str(root),
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["diagnostics"]


def _relative(path: str, root: Path) -> str:
    return Path(path).resolve().relative_to(root.resolve()).as_posix()


def _compare(expected, found: list[tuple[str, str, int, int]]) -> tuple[list, list]:
    remaining = list(found)
    missing = []
    for (file, code, line, column), count in sorted(expected.items(), key=str):
        for _ in range(count):
            for item in remaining:
                if item[:3] == (file, code, line) and (column is None or item[3] == column):
                    remaining.remove(item)
                    break
            else:
                missing.append((file, code, line, column))
    return missing, remaining


def test_there_are_projects_for_the_cross_file_shapes() -> None:
    names = {p.id for p in PROJECTS}
    assert len(names) >= 10, names
    assert any(p.expected() for p in PROJECTS)
    assert any(not p.expected() for p in PROJECTS), "traps that must stay silent"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.id)
def test_cli_findings_are_exactly_the_expected_ones(project: ProjectCase) -> None:
    found = [
        (
            _relative(d["path"], project.root),
            d["code"],
            d["location"]["line"],
            d["location"]["column"],
        )
        for d in _cli(project.root)
    ]
    missing, unexpected = _compare(project.expected(), found)
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.id)
def test_flake8_reports_what_the_cli_reports(project: ProjectCase) -> None:
    pytest.importorskip("flake8")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "flake8",
            "--isolated",
            "--select",
            "EMA",
            "--format",
            "%(path)s\t%(row)d\t%(col)d\t%(code)s",
            str(project.root),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    found = []
    for line in proc.stdout.splitlines():
        path, row, col, code = line.split("\t")
        found.append((_relative(path, project.root), code, int(row), int(col)))
    missing, unexpected = _compare(project.expected(), found)
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.id)
def test_fixes_edit_only_the_files_with_findings(project: ProjectCase, tmp_path: Path) -> None:
    copy = tmp_path / project.id
    shutil.copytree(project.root, copy)
    before = {p: p.read_bytes() for p in copy.rglob("*.py")}
    with_findings = {file for file, *_ in project.expected()}
    _cli(copy, "--fix", "--unsafe-fixes", "--isolated")
    after = {p: p.read_bytes() for p in copy.rglob("*.py")}
    changed = {p.relative_to(copy).as_posix() for p in before if before[p] != after[p]}
    assert changed <= with_findings, f"fixes touched {changed - with_findings}"
    for path in changed:
        cst.parse_module((copy / path).read_bytes())
    # Fixing again changes nothing.
    _cli(copy, "--fix", "--unsafe-fixes", "--isolated")
    assert {p: p.read_bytes() for p in copy.rglob("*.py")} == after
