"""Output formats. Each takes the run's results and writes them to a stream.

What the formats share lives in ``base`` (each format imports it, not this package, which
imports each format); it is re-exported here.
"""

from __future__ import annotations

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


def renderers() -> dict[str, Renderer]:
    """Every output format by name, in the order ``--help`` lists them."""
    from . import full, github, gitlab, grouped, json_format, json_lines, junit, sarif, text

    return {
        "text": text.render_full,
        "concise": text.render_concise,
        "full": full.render,
        "grouped": grouped.render,
        "json": json_format.render,
        "json-lines": json_lines.render,
        "sarif": sarif.render,
        "github": github.render,
        "gitlab": gitlab.render,
        "junit": junit.render,
    }
