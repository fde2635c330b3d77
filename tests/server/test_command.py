"""``ema-lint server`` without its extra installed: one line that names the extra."""

from __future__ import annotations

import io
import sys

import pytest

from ema_lint import cli


@pytest.mark.parametrize("missing", ["pygls", "lsprotocol"])
def test_missing_extra_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch, missing: str):
    monkeypatch.setitem(sys.modules, missing, None)  # makes ``import missing`` fail
    stderr = io.StringIO()
    assert cli.main(["server"], stdout=io.StringIO(), stderr=stderr) == 2
    message = stderr.getvalue()
    assert message.count("\n") == 1
    assert "pip install 'ema-lint[server]'" in message


def test_server_is_a_subcommand(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "server" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["server", "--help"])
    assert "language server" in capsys.readouterr().out
