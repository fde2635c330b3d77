"""Fixtures shared by every test: run the CLI in-process, an isolated project folder."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from ema_lint.cli import main
from tests import profiles  # noqa: F401  (registers and loads the hypothesis profiles)


@dataclass
class Result:
    code: int
    out: str
    err: str


class _Out(io.StringIO):
    """A text stream with a binary buffer, like sys.stdout."""

    def __init__(self) -> None:
        super().__init__()
        self.buffer = io.BytesIO()

    def text(self) -> str:
        return self.getvalue() + self.buffer.getvalue().decode("utf-8", "replace")


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)

    def _run(*args: str | Path, stdin: bytes = b"", cwd: Path | None = None) -> Result:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        out, err = _Out(), _Out()
        code = main([str(a) for a in args], stdout=out, stderr=err, stdin=io.BytesIO(stdin))
        return Result(code, out.text(), err.text())

    return _run


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with a config of its own, isolated from the repository's."""
    (tmp_path / "pyproject.toml").write_text("[tool.ema-lint]\n")
    return tmp_path
