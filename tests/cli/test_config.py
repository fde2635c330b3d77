"""Configuration files: discovery, validation (errors name key and file), per-file ignores."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.samples import BAD


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[tool.ema-lint]\nselct = ["EMA1"]\n', "unknown key 'selct'"),
        ("[tool.ema-lint]\nselect = 'EMA1'\nignore = 3\n", "'ignore' must be a list"),
        ('[tool.ema-lint]\nselect = ["EMA999"]\n', "unknown rule 'EMA999'"),
        ("[tool.ema-lint.ema-decay-out-of-range]\nmin = 'low'\n", "min"),
        ("[tool.ema-lint.ema-decay-out-of-range]\nminimum = 0.9\n", "unknown option 'minimum'"),
        ("[tool.ema-lint]\nunsafe-fixes = 'yes'\n", "'unsafe-fixes' must be true or false"),
        ("[tool.ema-lint\n", "invalid TOML"),
    ],
)
def test_bad_config_is_an_error_naming_key_and_file(run, tmp_path: Path, text, fragment) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "train.py").write_text(BAD)
    result = run("train.py", cwd=tmp_path)
    assert result.code == 2
    assert "pyproject.toml" in result.out + result.err
    assert fragment in result.out + result.err
    # The run stops: checked with the defaults, the file would get findings (and fixes)
    # the configuration may have turned off (tests/hostile/test_config_errors.py).
    assert "EMA101" not in result.out


def test_explicit_config_error_is_usage_error(run, tmp_path: Path) -> None:
    (tmp_path / "ema-lint.toml").write_text("select = [1]\n")
    result = run("--config", "ema-lint.toml", ".", cwd=tmp_path)
    assert result.code == 2 and "ema-lint.toml" in result.err and "select" in result.err


def test_nearest_config_wins_and_rule_tables(run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.ema-lint]\nignore = ["EMA101"]\n')
    sub = tmp_path / "finetune"
    sub.mkdir()
    (sub / "ema-lint.toml").write_text("[ema-decay-out-of-range]\nmin = 0.95\n")
    (tmp_path / "a.py").write_text(BAD)
    (sub / "b.py").write_text(BAD)
    (sub / "c.py").write_text(BAD.replace("0.99)", "0.9)"))
    result = run(".", "--output-format", "concise", cwd=tmp_path)
    assert "a.py" not in result.out  # ignored by pyproject
    assert "b.py" not in result.out  # 0.99 is fine with min = 0.95
    assert "c.py:3:31: EMA101" in result.out


def test_dot_config_and_isolated(run, tmp_path: Path) -> None:
    (tmp_path / ".ema-lint.toml").write_text('ignore = ["EMA101"]\n')
    (tmp_path / "a.py").write_text(BAD)
    assert run("a.py", cwd=tmp_path).code == 0
    assert run("--isolated", "a.py", cwd=tmp_path).code == 1


def test_pyproject_without_section_is_skipped(run, tmp_path: Path) -> None:
    (tmp_path / "ema-lint.toml").write_text('ignore = ["EMA101"]\n')
    sub = tmp_path / "pkg"
    sub.mkdir()
    (sub / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (sub / "a.py").write_text(BAD)
    assert run("pkg/a.py", cwd=tmp_path).code == 0


def test_per_file_ignores(run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ema-lint.per-file-ignores]\n"tests/*" = ["EMA101"]\n"legacy_*.py" = ["EMA1"]\n'
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text(BAD)
    (tmp_path / "legacy_train.py").write_text(BAD)
    (tmp_path / "train.py").write_text(BAD)
    result = run(".", "--output-format", "concise", cwd=tmp_path)
    assert "t.py" not in result.out and "legacy_train.py" not in result.out
    assert "train.py:3:31" in result.out


def test_config_exclude(run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ema-lint]\nextend-exclude = ["experiments/old"]\n'
    )
    old = tmp_path / "experiments" / "old"
    old.mkdir(parents=True)
    (old / "a.py").write_text(BAD)
    (tmp_path / "experiments" / "b.py").write_text(BAD)
    result = run(".", "--output-format", "concise", cwd=tmp_path)
    assert "b.py" in result.out and "a.py" not in result.out


def test_unsafe_fixes_from_config(run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\nunsafe-fixes = true\n")
    path = tmp_path / "a.py"
    path.write_text(BAD)
    assert run("--fix", "a.py", cwd=tmp_path).code == 0
    assert "0.999)" in path.read_text()


def test_plain_name_excludes_decide_by_name_as_the_patterns_do() -> None:
    from ema_lint.config import DEFAULT_EXCLUDES, _Excludes

    plain = _Excludes([*DEFAULT_EXCLUDES, "outputs/", "scratch.py"])
    assert plain.names is not None  # the fast path: names only
    for name in ("build", "build.py", ".git", "outputs", "scratch.py", "src", "wandb", "Build"):
        for is_dir in (True, False):
            expected = plain.spec.match_file(name + "/" if is_dir else name)
            assert plain.matches(name, None, is_dir) == expected, (name, is_dir)
    # Wildcards, paths and negations keep the patterns' own matching.
    for patterns in (["*.pyc"], ["docs/evidence"], ["build", "!build"], ["out[12]"]):
        assert _Excludes(patterns).names is None
