"""The language server: LSP requests and notifications turned into lints and edits.

Documents are linted on open, change and save; a saved configuration file (or a watched
one the client reports) re-lints every open document, since any of them may be governed by
it. A saved or watched Python file (or one opened that the project model did not list yet)
updates the model's import index for that file alone and re-lints the open documents that
import it or that it imports: a helper's findings depend on what its callers pass. Other
modules are read from disk, so an unsaved edit reaches the others when it is saved.
Code actions: each finding's fix (unsafe ones say so in their title and are never
preferred), a ``# noqa`` comment, and fix all (``source.fixAll.ema-lint``). Hover shows
the rule's ``ema-lint explain`` text.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lsprotocol import types

from .. import registry
from .._version import __version__
from ..config import CONFIG_NAMES
from ..rule_docs import render
from . import text as textlib
from .documents import Documents, Linted, path_of
from .linting import Finding, fix_all, fixed_text, suppressed_text

try:  # pygls 2
    from pygls.lsp.server import LanguageServer
except ImportError:  # pygls 1
    from pygls.server import LanguageServer  # type: ignore[no-redef]

SOURCE = "ema-lint"
FIX_ALL = "source.fixAll.ema-lint"
DOCS_URL = "https://ema-lint.readthedocs.io/en/latest/rules/{code}/"


class EmaLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("ema-lint", __version__)
        self.documents = Documents()
        self.shown: set[str] = set()  # notes already shown to the user

    # Sending ------------------------------------------------------------------------------
    def encoding(self) -> str:
        value = getattr(self.workspace, "position_encoding", None)
        return str(getattr(value, "value", value) or textlib.UTF16)

    def publish(self, uri: str, version: int | None, diagnostics: list[types.Diagnostic]) -> None:
        params = types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version)
        send = getattr(self, "text_document_publish_diagnostics", None)
        if send is not None:
            send(params)
        else:  # pygls 1
            self.publish_diagnostics(uri, diagnostics, version)  # type: ignore[attr-defined]

    def note(self, message: str) -> None:
        if message in self.shown:
            return
        self.shown.add(message)
        params = types.ShowMessageParams(type=types.MessageType.Warning, message=message)
        send = getattr(self, "window_show_message", None)
        if send is not None:
            send(params)
        else:  # pygls 1
            self.show_message(message, types.MessageType.Warning)  # type: ignore[attr-defined]

    def log(self, message: str) -> None:
        params = types.LogMessageParams(type=types.MessageType.Error, message=message)
        send = getattr(self, "window_log_message", None)
        if send is not None:
            send(params)
        else:  # pygls 1
            self.show_message_log(message, types.MessageType.Error)  # type: ignore[attr-defined]

    # Linting ------------------------------------------------------------------------------
    def lint(self, uri: str) -> None:
        document = self.workspace.get_text_document(uri)
        try:
            linted = self.documents.update(uri, document.version, document.source, self.roots())
            if linted is None:
                return
            diagnostics = [self.diagnostic(linted, f) for f in linted.findings]
        except Exception as error:  # a bug of ema-lint must not take the editor's server down
            self.log(f"ema-lint: cannot check {uri}: {type(error).__name__}: {error}")
            return
        for message in linted.lint.notes:
            self.note(message)
        self.publish(uri, linted.version, diagnostics)

    def roots(self) -> list[Path]:
        """The workspace folders (excludes apply to the folders below them)."""
        folders = getattr(self.workspace, "folders", None) or {}
        uris = [f.uri for f in folders.values()]
        root = getattr(self.workspace, "root_uri", None)
        if root:
            uris.append(root)
        return [p for p in map(path_of, uris) if p is not None]

    def watch_configuration(self) -> None:
        """Ask the client to report changes of configuration files (if it can), so that
        editing one outside the editor re-checks the open documents."""
        try:
            watched = self.client_capabilities.workspace.did_change_watched_files
        except AttributeError:
            return
        if watched is None or not watched.dynamic_registration:
            return
        # Python files too: a module written outside the editor may call an open helper.
        globs = [f"**/{name}" for name in CONFIG_NAMES] + ["**/*.py"]
        watchers = [types.FileSystemWatcher(glob_pattern=glob) for glob in globs]
        params = types.RegistrationParams(
            registrations=[
                types.Registration(
                    id="ema-lint-configuration",
                    method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                    register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers),
                )
            ]
        )
        register = getattr(self, "client_register_capability", None)
        if register is None:  # pygls 1
            register = self.register_capability  # type: ignore[attr-defined]
        register(params)

    def relint_all(self) -> None:
        for uri in self.documents.uris():
            self.lint(uri)

    def index_changes(self, paths: list[Path], *, only_new: bool = False) -> list[str]:
        """Tell the project model that files changed on disk (it updates its index for
        them alone); returns the open documents that import them or that they import,
        whose findings may depend on them (a helper's depend on its callers).
        ``only_new``: only a file the model did not list yet counts (a document opened:
        its text on disk is no news otherwise)."""
        from ..analysis.project import model

        changes = []
        for path in paths:
            if not path.name.endswith(".py"):
                continue
            try:
                change = model.file_changed(str(path))
            except Exception as error:  # a bug of ema-lint must not take the server down
                self.log(f"ema-lint: cannot index {path}: {type(error).__name__}: {error}")
                continue
            if change is not None and (change.listed or not only_new):
                changes.append(change)
        if not changes:
            return []
        linked = []
        for uri in self.documents.uris():
            other = path_of(uri)
            if other is not None and any(model.linked(c, os.path.abspath(other)) for c in changes):
                linked.append(uri)
        return linked

    # Conversions --------------------------------------------------------------------------
    def range(self, linted: Linted, start: int, end: int) -> types.Range:
        lines = linted.lines
        encoding = self.encoding()
        (l1, c1), (l2, c2) = lines.to_client(start, encoding), lines.to_client(end, encoding)
        return types.Range(types.Position(l1, c1), types.Position(l2, c2))

    def offset(self, linted: Linted, position: types.Position) -> int:
        return linted.lines.from_client(position.line, position.character, self.encoding())

    def diagnostic(self, linted: Linted, finding: Finding) -> types.Diagnostic:
        d = finding.diagnostic
        severity = types.DiagnosticSeverity.Warning
        if registry.is_internal(d.code):
            severity = types.DiagnosticSeverity.Error
        return types.Diagnostic(
            range=self.range(linted, finding.start, finding.end),
            message=d.message,
            severity=severity,
            code=d.code,
            code_description=types.CodeDescription(href=DOCS_URL.format(code=d.code)),
            source=SOURCE,
            data={"name": d.name},
            related_information=self.related(linted, d) or None,
        )

    def related(self, linted: Linted, d: Any) -> list[types.DiagnosticRelatedInformation]:
        """The places the finding rests on (a value's use, another file's class)."""
        own = path_of(linted.uri)
        found = []
        for r in d.related:
            same = own is None or Path(r.path) == own  # an unsaved buffer: itself
            uri = linted.uri if same else Path(r.path).resolve().as_uri()
            at = types.Position(max(r.line - 1, 0), 0)
            found.append(
                types.DiagnosticRelatedInformation(
                    location=types.Location(uri=uri, range=types.Range(at, at)),
                    message=r.message,
                )
            )
        return found

    def edit(self, linted: Linted, new_text: str | None) -> types.WorkspaceEdit | None:
        if new_text is None:
            return None
        change = textlib.difference(linted.lint.text, new_text)
        if change is None:
            return None
        edit = types.TextEdit(
            range=self.range(linted, change.start, change.end), new_text=change.content
        )
        return types.WorkspaceEdit(changes={linted.uri: [edit]})

    # Requests -----------------------------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        linted = self.current(params.text_document.uri)
        if linted is None:
            return []
        only = params.context.only
        wanted = lambda kind: not only or any(kind.startswith(str(k)) for k in only)  # noqa: E731
        start = self.offset(linted, params.range.start)
        end = self.offset(linted, params.range.end)
        actions: list[types.CodeAction] = []
        if wanted(types.CodeActionKind.QuickFix.value):
            for finding in linted.findings:
                if finding.start <= end and start <= finding.end:
                    actions.extend(self.quick_fixes(linted, finding))
        if wanted(FIX_ALL) and any(
            f.diagnostic.fix is not None and linted.lint.settings.allows(f.diagnostic.fix)
            for f in linted.findings
        ):
            action = types.CodeAction(title="ema-lint: fix all auto-fixable problems", kind=FIX_ALL)
            if self.resolves_edits():
                # Fixing the whole file re-lints it: done only when the user picks the action.
                action.data = {"uri": linted.uri, "version": linted.version}
                actions.append(action)
            else:
                action.edit = self.edit(linted, fix_all(linted.lint))
                if action.edit is not None:
                    actions.append(action)
        return actions

    def resolves_edits(self) -> bool:
        """Whether the client asks for a code action's edit when it is chosen."""
        try:
            support = self.client_capabilities.text_document.code_action.resolve_support
        except AttributeError:
            return False
        return support is not None and "edit" in support.properties

    def resolve(self, action: types.CodeAction) -> types.CodeAction:
        data = action.data if isinstance(action.data, dict) else {}
        uri = data.get("uri")
        if action.kind == FIX_ALL and isinstance(uri, str):
            linted = self.current(uri)
            if linted is not None:
                action.edit = self.edit(linted, fix_all(linted.lint))
        return action

    def quick_fixes(self, linted: Linted, finding: Finding) -> list[types.CodeAction]:
        d = finding.diagnostic
        diagnostic = self.diagnostic(linted, finding)
        actions: list[types.CodeAction] = []
        if d.fix is not None:
            edit = self.edit(linted, fixed_text(linted.lint, finding))
            if edit is not None:
                title = f"{d.code}: {d.fix.title}"
                if finding.unsafe:
                    title += " (unsafe fix: review it, it may change behaviour)"
                actions.append(
                    types.CodeAction(
                        title=title,
                        kind=types.CodeActionKind.QuickFix,
                        diagnostics=[diagnostic],
                        edit=edit,
                        is_preferred=not finding.unsafe,
                    )
                )
        # ema-lint's own errors (a file that does not parse) are not silenced by a comment.
        internal = registry.is_internal(d.code)
        edit = None if internal else self.edit(linted, suppressed_text(linted.lint, finding))
        if edit is not None:
            actions.append(
                types.CodeAction(
                    title=f"{d.code}: suppress with # noqa",
                    kind=types.CodeActionKind.QuickFix,
                    diagnostics=[diagnostic],
                    edit=edit,
                )
            )
        return actions

    def hover(self, params: types.HoverParams) -> types.Hover | None:
        linted = self.current(params.text_document.uri)
        if linted is None:
            return None
        at = self.offset(linted, params.position)
        here = [f for f in linted.findings if f.start <= at <= f.end]
        if not here:
            return None
        parts: list[str] = []
        for code in dict.fromkeys(f.diagnostic.code for f in here):
            rule = registry.lookup(code)
            if rule is not None:
                parts.append(render(rule))
        if not parts:
            return None
        return types.Hover(
            contents=types.MarkupContent(
                kind=types.MarkupKind.Markdown, value="\n---\n\n".join(parts)
            ),
            range=self.range(linted, here[0].start, here[0].end),
        )

    def current(self, uri: str) -> Linted | None:
        """The lint of the open document as the editor holds it now."""
        linted = self.documents.get(uri)
        if linted is None:
            return None
        if linted.lint.text != self.workspace.get_text_document(uri).source:
            self.lint(uri)
            linted = self.documents.get(uri)
        return linted


def create() -> EmaLintServer:
    """A server with every feature registered."""
    server = EmaLintServer()

    @server.feature(types.INITIALIZED)
    def initialized(ls: EmaLintServer, params: types.InitializedParams) -> None:
        ls.watch_configuration()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: EmaLintServer, params: types.DidOpenTextDocumentParams) -> None:
        linked = ls.index_changes(_paths([params.text_document.uri]), only_new=True)
        ls.lint(params.text_document.uri)
        for uri in linked:
            ls.lint(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: EmaLintServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.lint(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: EmaLintServer, params: types.DidSaveTextDocumentParams) -> None:
        if _is_config(params.text_document.uri):
            ls.relint_all()
        else:
            linked = ls.index_changes(_paths([params.text_document.uri]))
            ls.lint(params.text_document.uri)
            for uri in linked:
                ls.lint(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: EmaLintServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.documents.close(params.text_document.uri)
        ls.publish(params.text_document.uri, None, [])

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: EmaLintServer, params: types.DidChangeWatchedFilesParams) -> None:
        linked = ls.index_changes(_paths([change.uri for change in params.changes]))
        if any(_is_config(change.uri) for change in params.changes):
            ls.relint_all()
        else:
            for uri in linked:
                ls.lint(uri)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL]),
    )
    def code_action(ls: EmaLintServer, params: types.CodeActionParams) -> list[Any]:
        return ls.code_actions(params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    def code_action_resolve(ls: EmaLintServer, params: types.CodeAction) -> types.CodeAction:
        return ls.resolve(params)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: EmaLintServer, params: types.HoverParams) -> types.Hover | None:
        return ls.hover(params)

    return server


def _paths(uris: list[str]) -> list[Path]:
    return [p for p in map(path_of, uris) if p is not None]


def _is_config(uri: str) -> bool:
    path = path_of(uri)
    return path is not None and path.name in CONFIG_NAMES
