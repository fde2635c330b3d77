"""A client without code action resolve support (and without any optional capability): the
fix-all action carries its edit, positions are UTF-16, and the server still answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
types = pytest.importorskip("lsprotocol.types")

from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

from .test_server import PYTHON, _actions, _apply, _open, _settled  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(server_command=[sys.executable, "-m", "ema_lint", "server"]),
)
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=types.ClientCapabilities())
    )
    yield
    await lsp_client.shutdown_session()


async def test_fix_all_comes_with_its_edit(client: LanguageClient, tmp_path: Path):
    uri = _open(client, tmp_path / "train.py", PYTHON)
    assert await _settled(client, uri)
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(types.Position(0, 0), types.Position(0, 0)),
            context=types.CodeActionContext(
                diagnostics=[], only=[types.CodeActionKind.SourceFixAll]
            ),
        )
    )
    (fix_all,) = result
    assert fix_all.edit is not None
    assert _apply(PYTHON, fix_all.edit) == PYTHON.replace("swa_lrs=", "swa_lr=")
    assert [a.kind for a in await _actions(client, uri, only=["source"])] == [fix_all.kind]
