"""Configuration files that cannot be used: one error naming the file, and the run stops.

Malformed TOML and bad keys or values are covered by tests/cli/test_config.py
(``test_bad_config_is_an_error_naming_key_and_file``); these are the files that are not
TOML text at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.samples import BAD


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\xff\xfe[\x00t\x00o\x00o\x00l\x00]\x00", "not UTF-8 text (byte 0xff at offset 0)"),
        (b"[tool.ema-lint]\nselect = ['EMA1']\n\x00\x00", "invalid TOML"),
        (bytes(range(256)), "invalid TOML"),
    ],
    ids=["utf-16", "nul-bytes", "binary"],
)
def test_a_pyproject_that_is_not_toml_text(run, tmp_path: Path, content, fragment) -> None:
    (tmp_path / "pyproject.toml").write_bytes(content)
    (tmp_path / "train.py").write_text(BAD)
    result = run("train.py", cwd=tmp_path)
    assert result.code == 2
    assert "Traceback" not in result.out + result.err
    [error] = [line for line in result.out.splitlines() if line.startswith("error:")]
    assert "pyproject.toml: " in error and fragment in error
    assert "EMA101" not in result.out  # not checked with the defaults


def test_an_unreadable_pyproject(run, tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\n")
    (tmp_path / "train.py").write_text(BAD)
    real_open = Path.open

    def guarded_open(self, *args, **kwargs):
        if self.name == "pyproject.toml":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", guarded_open)
    result = run("train.py", cwd=tmp_path)
    assert result.code == 2
    assert "pyproject.toml: cannot read: Permission denied" in result.out
    assert "EMA101" not in result.out


def test_a_folder_named_pyproject_toml_is_not_a_configuration(run, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").mkdir()
    (tmp_path / "train.py").write_text(BAD)
    result = run("train.py", cwd=tmp_path)
    assert result.code == 1
    assert "train.py:3:31: EMA101" in result.out
