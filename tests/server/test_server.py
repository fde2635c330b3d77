"""The language server end to end: a real LSP client talks to ``python -m ema_lint server``
over stdio, as an editor does. One server serves the whole module (starting one costs a
Python start-up); each test writes its own files under a temporary folder."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
types = pytest.importorskip("lsprotocol.types")

from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

from ema_lint import registry  # noqa: E402
from ema_lint.docs import render  # noqa: E402

pytestmark = pytest.mark.asyncio(loop_scope="module")

PYTHON = """\
import torch
from timm.utils.model_ema import ModelEmaV2
from torch.optim.swa_utils import SWALR


def build(model, optimizer):
    ema = ModelEmaV2(model, decay=0.9)  # keep this comment
    sched = SWALR(optimizer, swa_lrs=0.05)
    return ema, sched
"""
DECAY = (6, PYTHON.splitlines()[6].index("0.9"))  # 0-based line and column of the decay


@pytest_lsp.fixture(
    scope="module",
    config=ClientServerConfig(server_command=[sys.executable, "-m", "ema_lint", "server"]),
)
async def client(lsp_client: LanguageClient, tmp_path_factory):
    root = tmp_path_factory.mktemp("workspace")

    @lsp_client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def register(params: types.RegistrationParams) -> None:
        REGISTRATIONS.extend(params.registrations)

    await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            workspace_folders=[types.WorkspaceFolder(uri=root.as_uri(), name="workspace")],
        )
    )
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    # No configuration file above tmp_path: the defaults govern it unless a test writes one.
    return tmp_path


_versions: dict[str, int] = {}
REGISTRATIONS: list = []


def _open(client: LanguageClient, path: Path, text: str, language: str = "python") -> str:
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    _versions[uri] = 1
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id=language, version=1, text=text
            )
        )
    )
    return uri


def _change(client: LanguageClient, uri: str, text: str) -> None:
    _versions[uri] += 1
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=_versions[uri]),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


async def _settled(client: LanguageClient, uri: str) -> list:
    """The diagnostics published for ``uri`` once the server handled what was sent.

    The server handles messages in order and publishes while handling a notification, so
    the answer to a request sent after it arrives after the diagnostics."""
    await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=0, character=0),
        )
    )
    return list(client.diagnostics.get(uri, []))


def _codes(diagnostics) -> list[str]:
    return sorted(str(d.code) for d in diagnostics)


def _apply(text: str, edit) -> str:
    """A workspace edit of one document applied to ``text`` (ASCII: columns are chars)."""
    (edits,) = edit.changes.values()
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position) -> int:
        return starts[position.line] + position.character

    for e in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end) :]
    return text


async def _actions(client: LanguageClient, uri: str, diagnostic=None, only=None) -> list:
    whole = types.Range(types.Position(0, 0), types.Position(10_000, 0))
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostic.range if diagnostic is not None else whole,
            context=types.CodeActionContext(
                diagnostics=[diagnostic] if diagnostic is not None else [], only=only
            ),
        )
    )
    actions = []
    for action in result or []:
        if action.edit is None:  # the client resolves the edit when the action is chosen
            action = await client.code_action_resolve_async(action)
        actions.append(action)
    return actions


def _fixes(actions) -> list:
    return [a for a in actions if a.kind == types.CodeActionKind.QuickFix and "noqa" not in a.title]


def _noqa(actions) -> list:
    return [a for a in actions if a.kind == types.CodeActionKind.QuickFix and "noqa" in a.title]


def _one(diagnostics, code: str):
    (found,) = [d for d in diagnostics if d.code == code]
    return found


# Diagnostics --------------------------------------------------------------------------------
async def test_open_publishes_findings_with_ranges(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    diagnostics = await _settled(client, uri)
    assert _codes(diagnostics) == ["EMA101", "EMA405"]
    ema101 = _one(diagnostics, "EMA101")
    assert ema101.range == types.Range(
        types.Position(*DECAY), types.Position(DECAY[0], DECAY[1] + 3)
    )
    assert ema101.source == "ema-lint"
    assert ema101.severity == types.DiagnosticSeverity.Warning
    assert "0.9" in ema101.message
    assert ema101.code_description.href.endswith("/rules/EMA101/")


async def test_columns_count_utf16_code_units(client: LanguageClient, folder: Path):
    # The client speaks UTF-16 (VS Code's only encoding): an emoji is two code units.
    text = (
        'from timm.utils.model_ema import ModelEmaV2\nema = ModelEmaV2(m, note="😀", decay=0.9)\n'
    )
    uri = _open(client, folder / "emoji.py", text)
    (diagnostic,) = await _settled(client, uri)
    column = text.splitlines()[1].index("0.9") + 1
    assert diagnostic.range.start == types.Position(1, column)
    (fix,) = _fixes(await _actions(client, uri, diagnostic))
    (edit,) = fix.edit.changes[uri]
    # "0.9" becomes "0.999": "99" inserted after it, the emoji counted as two units before.
    assert edit.range == types.Range(types.Position(1, column + 3), types.Position(1, column + 3))
    assert edit.new_text == "99"


async def test_change_republishes(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    assert "EMA101" in _codes(await _settled(client, uri))
    _change(client, uri, PYTHON.replace("decay=0.9)", "decay=0.9999)"))
    assert _codes(await _settled(client, uri)) == ["EMA405"]
    _change(client, uri, "x = 1\n")
    assert await _settled(client, uri) == []


async def test_save_republishes(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    await _settled(client, uri)
    client.diagnostics.pop(uri)
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert _codes(await _settled(client, uri)) == ["EMA101", "EMA405"]


async def test_close_clears(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    assert await _settled(client, uri)
    client.text_document_did_close(
        types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert await _settled(client, uri) == []


async def test_unparseable_file_is_an_error(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "broken.py", "from timm.utils import ModelEmaV2\nema = (\n")
    (diagnostic,) = await _settled(client, uri)
    assert diagnostic.code == "EMA901"
    assert diagnostic.severity == types.DiagnosticSeverity.Error
    assert await _actions(client, uri, diagnostic, only=[types.CodeActionKind.QuickFix]) == []


async def test_other_files_are_not_checked(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "notes.txt", PYTHON, language="plaintext")
    assert await _settled(client, uri) == []


def _notebook(*cells: str, as_list: bool = True) -> str:
    document = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": cell.splitlines(keepends=True) if as_list else cell,
            }
            for cell in cells
        ],
        "metadata": {"kernelspec": {"language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document, indent=1) + "\n"


NB_CELLS = (
    "%matplotlib inline\nfrom timm.utils.model_ema import ModelEmaV2\n",
    'print("é")\nema = ModelEmaV2(model, decay=0.9)\n',
)


def _position_of(text: str, needle: str) -> types.Position:
    offset = text.index(needle)
    line = text.count("\n", 0, offset)
    return types.Position(line, offset - (text.rfind("\n", 0, offset) + 1))


@pytest.mark.parametrize("as_list", [True, False], ids=["lines", "string"])
async def test_notebook_findings_sit_in_the_json(
    client: LanguageClient, folder: Path, as_list: bool
):
    text = _notebook(*NB_CELLS, as_list=as_list)
    uri = _open(client, folder / "explore.ipynb", text, language="json")
    diagnostics = await _settled(client, uri)
    assert _codes(diagnostics) == ["EMA101"]
    start = _position_of(text, "0.9)")
    assert diagnostics[0].range == types.Range(
        start, types.Position(start.line, start.character + 3)
    )
    # The unsafe fix rewrites the cell inside the JSON, keeping the rest of the file.
    (fix,) = _fixes(await _actions(client, uri, diagnostics[0]))
    fixed = _apply(text, fix.edit)
    assert fixed == text.replace("decay=0.9)", "decay=0.999)")
    noqa = _noqa(await _actions(client, uri, diagnostics[0]))
    suppressed = _apply(text, noqa[0].edit)
    assert json.loads(suppressed)["cells"][1]["source"] == (
        ['print("é")\n', "ema = ModelEmaV2(model, decay=0.9)  # noqa: EMA101\n"]
        if as_list
        else 'print("é")\nema = ModelEmaV2(model, decay=0.9)  # noqa: EMA101\n'
    )
    _change(client, uri, suppressed)
    assert await _settled(client, uri) == []


YAML = """\
# Hydra config group file
ema:
  _target_: timm.utils.ModelEmaV3
  decay: 0.9  # too low
"""


async def test_yaml_config(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "config.yaml", YAML, language="yaml")
    diagnostics = await _settled(client, uri)
    assert _codes(diagnostics) == ["EMA101"]
    assert diagnostics[0].range == types.Range(types.Position(3, 9), types.Position(3, 12))
    actions = await _actions(client, uri, diagnostics[0])
    (fix,), (noqa,) = _fixes(actions), _noqa(actions)
    assert _apply(YAML, fix.edit) == YAML.replace("0.9 ", "0.999 ")
    suppressed = _apply(YAML, noqa.edit)
    assert suppressed == YAML.replace("# too low", "# too low  # noqa: EMA101")
    _change(client, uri, suppressed)
    assert await _settled(client, uri) == []


# Code actions -------------------------------------------------------------------------------
async def test_safe_fix(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    ema405 = _one(await _settled(client, uri), "EMA405")
    fixes = _fixes(await _actions(client, uri, ema405))
    assert len(fixes) == 1
    assert fixes[0].is_preferred
    assert "unsafe" not in fixes[0].title
    assert fixes[0].title.startswith("EMA405: ")
    assert _apply(PYTHON, fixes[0].edit) == PYTHON.replace("swa_lrs=", "swa_lr=")


async def test_unsafe_fix_is_marked(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    ema101 = _one(await _settled(client, uri), "EMA101")
    fixes = _fixes(await _actions(client, uri, ema101))
    assert len(fixes) == 1
    assert "unsafe" in fixes[0].title
    assert not fixes[0].is_preferred
    assert _apply(PYTHON, fixes[0].edit) == PYTHON.replace("decay=0.9)", "decay=0.999)")


async def test_noqa_suppression(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    ema101 = _one(await _settled(client, uri), "EMA101")
    (noqa,) = _noqa(await _actions(client, uri, ema101))
    suppressed = _apply(PYTHON, noqa.edit)
    assert suppressed == PYTHON.replace(
        "# keep this comment", "# keep this comment  # noqa: EMA101"
    )
    _change(client, uri, suppressed)
    assert _codes(await _settled(client, uri)) == ["EMA405"]
    # A second code joins the existing comment.
    ema405 = _one(await _settled(client, uri), "EMA405")
    (noqa,) = _noqa(await _actions(client, uri, ema405))
    both = _apply(suppressed, noqa.edit)
    assert "swa_lrs=0.05)  # noqa: EMA405\n" in both
    _change(client, uri, both)
    assert await _settled(client, uri) == []


async def test_noqa_on_a_multiline_string_goes_to_the_statement(
    client: LanguageClient, folder: Path
):
    text = (
        "from timm.utils.model_ema import ModelEmaV2\n"
        'ema = ModelEmaV2(model, note="""\n'
        'text""", decay=0.9)\n'
    )
    uri = _open(client, folder / "strings.py", text)
    ema101 = _one(await _settled(client, uri), "EMA101")
    (noqa,) = _noqa(await _actions(client, uri, ema101))
    suppressed = _apply(text, noqa.edit)
    _change(client, uri, suppressed)
    assert await _settled(client, uri) == []
    compile(suppressed, "strings.py", "exec")


async def test_fix_all_applies_the_safe_fixes(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    await _settled(client, uri)
    actions = await _actions(client, uri, only=[types.CodeActionKind.SourceFixAll])
    (fix_all,) = actions
    assert fix_all.kind == "source.fixAll.ema-lint"
    assert _apply(PYTHON, fix_all.edit) == PYTHON.replace("swa_lrs=", "swa_lr=")
    # Nothing fixable left: no fix-all action.
    _change(client, uri, _apply(PYTHON, fix_all.edit))
    await _settled(client, uri)
    assert await _actions(client, uri, only=[types.CodeActionKind.SourceFixAll]) == []


async def test_actions_outside_a_finding(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    await _settled(client, uri)
    line0 = types.Diagnostic(
        range=types.Range(types.Position(0, 0), types.Position(0, 1)), message="elsewhere"
    )
    actions = await _actions(client, uri, line0, only=[types.CodeActionKind.QuickFix])
    assert actions == []


# Hover --------------------------------------------------------------------------------------
async def test_hover_shows_explain(client: LanguageClient, folder: Path):
    uri = _open(client, folder / "train.py", PYTHON)
    await _settled(client, uri)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(DECAY[0], DECAY[1] + 1),
        )
    )
    assert hover is not None
    assert hover.contents.kind == types.MarkupKind.Markdown
    assert hover.contents.value == render(registry.lookup("EMA101"))
    assert hover.range.start == types.Position(*DECAY)
    nothing = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(0, 3),
        )
    )
    assert nothing is None


# Configuration ------------------------------------------------------------------------------
async def test_project_configuration_governs_findings(client: LanguageClient, folder: Path):
    project = folder / "project"
    (project / "src").mkdir(parents=True)
    config = project / "pyproject.toml"
    config.write_text(
        '[tool.ema-lint]\nignore = ["EMA405"]\n\n'
        "[tool.ema-lint.ema-decay-out-of-range]\nmin = 0.95\n",
        encoding="utf-8",
    )
    uri = _open(client, project / "src" / "train.py", PYTHON)
    ema101 = _one(await _settled(client, uri), "EMA101")
    assert _codes(await _settled(client, uri)) == ["EMA101"]
    assert "0.95" in ema101.message
    # Unsafe fixes turned on by the configuration: fix all applies them.
    (fix_all,) = await _actions(client, uri, only=[types.CodeActionKind.SourceFixAll]) or [None]
    assert fix_all is None
    config_uri = _open(
        client,
        config,
        '[tool.ema-lint]\nignore = ["EMA101"]\nunsafe-fixes = true\n',
        language="toml",
    )
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=config_uri))
    )
    assert _codes(await _settled(client, uri)) == ["EMA405"]
    (fix_all,) = await _actions(client, uri, only=[types.CodeActionKind.SourceFixAll])
    assert _apply(PYTHON, fix_all.edit) == PYTHON.replace("swa_lrs=", "swa_lr=")


async def test_watched_configuration_changes_recheck(client: LanguageClient, folder: Path):
    (registration,) = [r for r in REGISTRATIONS if r.method == "workspace/didChangeWatchedFiles"]
    patterns = {w["globPattern"] for w in registration.register_options["watchers"]}
    assert patterns == {"**/pyproject.toml", "**/ema-lint.toml", "**/.ema-lint.toml", "**/*.py"}
    project = folder / "project"
    project.mkdir()
    uri = _open(client, project / "train.py", PYTHON)
    assert _codes(await _settled(client, uri)) == ["EMA101", "EMA405"]
    # Changed outside the editor: the client reports it, the open documents are re-checked.
    config = project / ".ema-lint.toml"
    config.write_text('select = ["EMA4"]\n', encoding="utf-8")
    client.diagnostics.pop(uri)
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=config.as_uri(), type=types.FileChangeType.Created)]
        )
    )
    assert _codes(await _settled(client, uri)) == ["EMA405"]


async def test_excluded_files_are_not_checked(client: LanguageClient, folder: Path):
    project = folder / "project"
    for sub in ("generated/deep", "build", "src"):
        (project / sub).mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        '[tool.ema-lint]\nextend-exclude = ["generated", "old_*.py"]\n', encoding="utf-8"
    )
    for relative in ("generated/deep/train.py", "build/train.py", "src/old_train.py"):
        uri = _open(client, project / relative, PYTHON)
        assert await _settled(client, uri) == [], relative
    uri = _open(client, project / "src" / "train.py", PYTHON)
    assert _codes(await _settled(client, uri)) == ["EMA101", "EMA405"]


# The project: a helper's findings depend on the files that import it -------------------
ENGINE = """\
import torch


def train_one_epoch(model, loader, optimizer, tracker):
    for images, targets in loader:
        loss = torch.nn.functional.cross_entropy(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        tracker.update(model)
        optimizer.step()
"""
MAIN = """\
import torch
from timm.utils import ModelEmaV2

from engine import train_one_epoch


def main(model, loader, epochs):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model_ema = ModelEmaV2(model, decay=0.9998)
    for _ in range(epochs):
        train_one_epoch(model, loader, optimizer, model_ema)
"""
# The same caller with a meter, not an average: the helper stays silent.
MAIN_METER = MAIN.replace("model_ema)", "meter)").replace(
    "model_ema = ModelEmaV2(model, decay=0.9998)", "meter = object()"
)


def _project(folder: Path) -> Path:
    project = folder / "project"
    project.mkdir()
    (project / "setup.cfg").write_text("", encoding="utf-8")
    return project


async def test_a_new_importer_relints_the_open_helper(client: LanguageClient, folder: Path):
    project = _project(folder)
    helper = _open(client, project / "engine.py", ENGINE)
    assert _codes(await _settled(client, helper)) == []
    # A new file calls the helper with an average: opening it re-checks the helper.
    caller = _open(client, project / "main.py", MAIN)
    await _settled(client, caller)
    assert _codes(client.diagnostics.get(helper, [])) == ["EMA203"]


async def test_a_saved_caller_relints_the_open_helper(client: LanguageClient, folder: Path):
    project = _project(folder)
    caller = _open(client, project / "main.py", MAIN_METER)
    helper = _open(client, project / "engine.py", ENGINE)
    assert _codes(await _settled(client, helper)) == []
    _change(client, caller, MAIN)
    (project / "main.py").write_text(MAIN, encoding="utf-8")
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=caller))
    )
    await _settled(client, caller)
    assert _codes(client.diagnostics.get(helper, [])) == ["EMA203"]
    # And back: saved without the average, the helper is silent again.
    _change(client, caller, MAIN_METER)
    (project / "main.py").write_text(MAIN_METER, encoding="utf-8")
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=caller))
    )
    await _settled(client, caller)
    assert _codes(client.diagnostics.get(helper, [])) == []


async def test_a_watched_caller_relints_the_open_helper(client: LanguageClient, folder: Path):
    project = _project(folder)
    helper = _open(client, project / "engine.py", ENGINE)
    assert _codes(await _settled(client, helper)) == []
    # Written outside the editor (a checkout, another tool): the client reports it.
    caller = project / "main.py"
    caller.write_text(MAIN, encoding="utf-8")
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=caller.as_uri(), type=types.FileChangeType.Created)]
        )
    )
    assert _codes(await _settled(client, helper)) == ["EMA203"]
    caller.unlink()
    client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            changes=[types.FileEvent(uri=caller.as_uri(), type=types.FileChangeType.Deleted)]
        )
    )
    assert _codes(await _settled(client, helper)) == []
