"""The flake8 plugin reports exactly what the command reports, at the same positions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixture_cases import FIXTURES, ROOT


def _flake8(*paths: str) -> set[tuple[str, int, int, str]]:
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
            *paths,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr
    found = set()
    for line in proc.stdout.splitlines():
        path, row, col, code = line.split("\t")
        found.add((path, int(row), int(col), code))
    return found


def _cli(*paths: str) -> set[tuple[str, int, int, str]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ema_lint",
            "check",
            "--output-format",
            "json",
            "--exit-zero",
            *paths,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    return {
        (d["path"], d["location"]["line"], d["location"]["column"], d["code"])
        for d in document["diagnostics"]
        # flake8 reports unparseable files itself (E999) and never runs plugins on them.
        if d["code"] != "EMA901"
    }


def test_flake8_and_cli_agree_on_every_fixture() -> None:
    target = FIXTURES.relative_to(ROOT).as_posix()
    cli = _cli(target)
    assert cli, "the fixtures produce findings"
    flake8 = _flake8(target)
    assert flake8 == cli, {"only flake8": flake8 - cli, "only ema-lint": cli - flake8}


def test_flake8_columns_are_one_based_like_the_cli() -> None:
    path = (FIXTURES / "EMA101" / "keyword_and_positional.py").relative_to(ROOT).as_posix()
    found = {(row, col) for _, row, col, code in _flake8(path) if code == "EMA101"}
    # `ema_low = ModelEmaV2(model, decay=0.99)`: the value starts in column 35.
    assert (6, 35) in found
