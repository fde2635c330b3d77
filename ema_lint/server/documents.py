"""The open documents the server lints, and the lint of each one's current version."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from . import text as textlib
from .linting import Finding, Lint, lint


def path_of(uri: str) -> Path | None:
    """The file a ``file:`` URI names (None for other schemes: unsaved buffers, cells)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if parsed.netloc and parsed.netloc != "localhost":
        path = f"//{parsed.netloc}{path}"  # a UNC share
    if len(path) >= 3 and path[0] == "/" and path[2] == ":":
        path = path[1:]  # file:///C:/x on Windows
    return Path(path)


@dataclass(eq=False)
class Linted:
    uri: str
    version: int | None
    lint: Lint
    lines: textlib.Lines = field(init=False)

    def __post_init__(self) -> None:
        self.lines = textlib.Lines(self.lint.text)

    @property
    def findings(self) -> list[Finding]:
        return self.lint.findings


class Documents:
    """The last lint of each open document, by URI."""

    def __init__(self) -> None:
        self._linted: dict[str, Linted] = {}

    def update(
        self, uri: str, version: int | None, text: str, roots: Sequence[Path] = ()
    ) -> Linted | None:
        """Lint the document's text now (None if the server does not check it); ``roots``
        are the workspace folders."""
        path = path_of(uri)
        if path is None:
            self._linted.pop(uri, None)
            return None
        linted = Linted(uri, version, lint(text, path, roots))
        self._linted[uri] = linted
        return linted

    def get(self, uri: str) -> Linted | None:
        return self._linted.get(uri)

    def close(self, uri: str) -> None:
        self._linted.pop(uri, None)

    def uris(self) -> list[str]:
        return list(self._linted)
