"""A configuration error stops the run before any file is read or written.

Linting with the defaults instead reports what the configuration turned off, and ``--fix``
rewrites files it excluded. Option values are validated (type, finite, range, a minimum
below its maximum), from files, ``--option`` and flake8's flags alike.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ema_lint import runner
from tests.samples import BAD

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Files the run read (none may be, once the configuration is broken)."""
    read: list[str] = []
    real = runner.read_source

    def reading(path):
        read.append(str(path))
        return real(path)

    monkeypatch.setattr(runner, "read_source", reading)
    return read


def _tree(root: Path, config: str, nested: str | None = None) -> list[Path]:
    (root / "pyproject.toml").write_text(config)
    (root / "generated").mkdir()
    files = [root / "train.py", root / "generated" / "model.py"]
    if nested is not None:
        (root / "sub").mkdir()
        (root / "sub" / "pyproject.toml").write_text(nested)
        files.append(root / "sub" / "train.py")
    for path in files:
        path.write_text(BAD)
    return files


@pytest.mark.parametrize(
    ("config", "nested", "fragment"),
    [
        ('[tool.ema-lint]\nexclude = ["generated"]\nextnd-exclude = []\n', None, "unknown key"),
        ('[tool.ema-lint]\nexclude = ["generated"]\n', "[tool.ema-lint]\nslect = []\n", "slect"),
        (
            '[tool.ema-lint]\nexclude = ["generated"]\n[tool.ema-lint.EMA101]\nmin = "high"\n',
            None,
            "expected a float",
        ),
        ("[tool.ema-lint]\nexclude = [\n", None, "invalid TOML"),
    ],
    ids=["typo", "nested-typo", "option-type", "broken-toml"],
)
@pytest.mark.parametrize("args", [("--fix", "--unsafe-fixes"), ()], ids=["fix", "check"])
def test_a_configuration_error_stops_the_run_before_any_file_is_read(
    run, tmp_path: Path, no_reads: list[str], config: str, nested, fragment: str, args
) -> None:
    files = _tree(tmp_path, config, nested)
    result = run(*args, "-j1", ".", cwd=tmp_path)
    assert result.code == 2
    assert "Traceback" not in result.out + result.err
    assert fragment in result.out + result.err
    assert "EMA101" not in result.out  # nothing was linted with the defaults
    assert no_reads == []
    assert all(path.read_text() == BAD for path in files)  # nothing was written


def test_a_configuration_error_on_stdin_prints_nothing_to_fix(run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\nunknown = 1\n")
    result = run("--fix", "--unsafe-fixes", "-", stdin=BAD.encode(), cwd=tmp_path)
    assert result.code == 2
    assert "unknown key 'unknown'" in result.err
    assert "decay=0.999" not in result.out  # no fix made with the defaults


BAD_VALUES = [
    ("ema-decay-out-of-range", "min", "nan", "finite"),
    ("ema-decay-out-of-range", "max", "inf", "finite"),
    ("ema-decay-out-of-range", "min", "1e999", "finite"),
    ("ema-decay-out-of-range", "min", "-0.5", "from 0 to 1"),
    ("ema-decay-out-of-range", "max", "1.5", "from 0 to 1"),
    ("ema-decay-out-of-range", "min", "0.9999", "must be below ema-decay-out-of-range.max"),
    ("ema-decay-out-of-range", "max", "0.9", "min (0.999) must be below"),
    ("ema-decay-out-of-range", "teacher-min", "0.99999", "must be below"),
    ("ema-horizon-exceeds-training", "fraction", "2", "from 0 to 1"),
    ("swa-started-too-early", "min-start", "-1", "from 0 to 1"),
    ("ema-decay-out-of-range", "min", "yes", "expected a float"),
]


@pytest.mark.parametrize(("rule", "option", "value", "fragment"), BAD_VALUES)
@pytest.mark.parametrize("where", ["file", "flag"])
def test_option_values_are_validated(
    run, tmp_path: Path, no_reads: list[str], rule, option, value, fragment, where
) -> None:
    (tmp_path / "train.py").write_text(BAD)
    if where == "file":
        toml_value = f'"{value}"' if value == "yes" else value
        if value in ("nan", "inf"):
            toml_value = value  # TOML spells them bare
        (tmp_path / "pyproject.toml").write_text(
            f"[tool.ema-lint.{rule}]\n{option} = {toml_value}\n"
        )
        args: tuple[str, ...] = ()
    else:
        (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\n")
        args = ("--option", f"{rule}.{option}={value}")
    result = run("--fix", "--unsafe-fixes", *args, "train.py", cwd=tmp_path)
    assert result.code == 2, result.out
    assert "Traceback" not in result.out + result.err
    errors = (result.out + result.err).strip().splitlines()
    assert any(fragment in line and option in line for line in errors), errors
    assert no_reads == [] and (tmp_path / "train.py").read_text() == BAD


def test_a_range_set_across_the_file_and_the_command_line_is_judged_whole(
    run, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text(BAD)
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint.EMA101]\nmin = 0.9\n")
    # The file's min with the command line's max is a valid range, in any order of flags.
    ok = run("--option", "EMA101.max=0.995", "train.py", cwd=tmp_path)
    assert ok.code == 0, ok.out
    bad = run("--option", "EMA101.max=0.8", "train.py", cwd=tmp_path)
    assert bad.code == 2 and "min (0.9) must be below" in bad.out + bad.err


def _flake8(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--select", "EMA", *args, "."],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("config", "flags", "fragment"),
    [
        ("[tool.ema-lint]\n", ("--ema-decay-out-of-range-min=nan",), "finite"),
        ("[tool.ema-lint]\n", ("--ema-decay-out-of-range-min=0.99999",), "must be below"),
        ("[tool.ema-lint.EMA101]\nmax = 0.5\n", (), "must be below"),
        ("[tool.ema-lint]\nexclud = []\n", (), "unknown key 'exclud'"),
    ],
    ids=["nan-flag", "min-above-max-flag", "min-above-max-file", "typo"],
)
def test_flake8_stops_on_a_bad_option_or_configuration(
    tmp_path: Path, config: str, flags: tuple[str, ...], fragment: str
) -> None:
    pytest.importorskip("flake8")
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "train.py").write_text(BAD)
    done = _flake8(tmp_path, *flags)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Traceback" not in output, output
    assert fragment in output
    assert "EMA101" not in output  # nothing checked with the defaults
