"""Output formats. Each takes the run's results and writes them to a stream.

What the formats share lives in ``base`` (each format imports it, not this package, which
imports each format); it is re-exported here.
"""

from __future__ import annotations

import importlib
from typing import Any, cast

from .base import (
    DOCS_URL,
    FileLines,
    FileSpan,
    Renderer,
    RunResult,
    located_message,
    location_text,
    position_text,
    printable,
    repository_path,
    repository_root,
    rule_url,
)

__all__ = [
    "DOCS_URL",
    "FileLines",
    "FileSpan",
    "Renderer",
    "RunResult",
    "located_message",
    "location_text",
    "position_text",
    "printable",
    "renderers",
    "repository_path",
    "repository_root",
    "rule_url",
]


# Each format by name, in the order ``--help`` lists them: (module, function).
_FORMATS = {
    "text": ("text", "render_full"),
    "concise": ("text", "render_concise"),
    "full": ("full", "render"),
    "grouped": ("grouped", "render"),
    "json": ("json_format", "render"),
    "json-lines": ("json_lines", "render"),
    "sarif": ("sarif", "render"),
    "github": ("github", "render"),
    "gitlab": ("gitlab", "render"),
    "junit": ("junit", "render"),
}


def renderers() -> dict[str, Renderer]:
    """Every output format by name, in the order ``--help`` lists them. A format's module
    is imported when it renders (a run that prints text does not load an XML writer)."""
    return {name: _deferred(*where) for name, where in _FORMATS.items()}


def _deferred(module: str, function: str) -> Renderer:
    def render(*args: Any, **kwargs: Any) -> Any:
        loaded = importlib.import_module(f"{__name__}.{module}")
        return getattr(loaded, function)(*args, **kwargs)

    render.__name__ = render.__qualname__ = f"{module}.{function}"
    return cast(Renderer, render)
