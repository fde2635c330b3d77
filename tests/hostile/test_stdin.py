"""Source read from stdin: whatever the bytes, ``--fix`` echoes them back unless it fixed them.

Editors pipe the buffer through ``ema-lint --fix -`` and replace the buffer with the output,
so an empty or garbled output would destroy the user's text. Linting stdin that is not text
is covered by tests/cli/test_check.py (``test_stdin_that_is_not_text``).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ema_lint.cli import main
from tests.conftest import _Out
from tests.samples import BAD


def _fix_stdin(data: bytes, monkeypatch: pytest.MonkeyPatch, cwd: Path) -> tuple[int, bytes, str]:
    """(exit code, exact bytes written to stdout, stderr) of ``ema-lint --fix -``."""
    monkeypatch.chdir(cwd)
    out, err = _Out(), _Out()
    code = main(["--fix", "--unsafe-fixes", "-"], stdout=out, stderr=err, stdin=io.BytesIO(data))
    return code, out.getvalue().encode() + out.buffer.getvalue(), err.text()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\xff\xfe timm.ModelEmaV2 \x00",
        b"from timm.utils import ModelEmaV2\nema = ModelEmaV2(\n",
        b"# timm ModelEmaV2\nx = '\xe9'\n",
        b"x = " + b"(" * 5000 + b"timm.ModelEmaV2" + b")" * 5000 + b"\n",
    ],
    ids=["empty", "binary", "syntax-error", "invalid-utf8", "too-deep"],
)
def test_fix_on_stdin_returns_what_it_cannot_fix_unchanged(
    monkeypatch, project: Path, data: bytes
) -> None:
    code, out, err = _fix_stdin(data, monkeypatch, project)
    assert code == (0 if not data else 1)
    assert out == data
    assert "Traceback" not in err
    if data:
        assert "EMA901" in err


def test_fix_on_stdin_keeps_bom_cr_and_crlf(monkeypatch, project: Path) -> None:
    data = b"\xef\xbb\xbf" + BAD.replace("\n", "\r\n").encode() + b"x = 1\r"
    code, out, _ = _fix_stdin(data, monkeypatch, project)
    assert code == 0
    assert out == data.replace(b"0.99)", b"0.999)")
