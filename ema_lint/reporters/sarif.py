"""SARIF 2.1.0, for code-scanning dashboards (GitHub code scanning, Azure DevOps, IDEs).

One run with the tool's rule metadata (short and full description, help as Markdown, the
docs page's URI, whether a fix exists), one result per finding with its region, and the
fix as an artifact change where ema-lint can render it as text. Columns count Unicode code
points (``columnKind``), as every other ema-lint output does. Paths are relative to the
current folder where they can be (``%SRCROOT%``), so uploads from CI match the repository.
One-line errors (unreadable paths, configuration) become tool execution notifications.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import quote

from .. import registry
from .._version import __version__
from ..diagnostics import Diagnostic
from .base import FileLines, RunResult, located_message, rule_url

if TYPE_CHECKING:  # the rules (and libcst) are loaded only when a SARIF log is written
    from ..rule import Rule

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://ema-lint.readthedocs.io/"
SRCROOT = "%SRCROOT%"


def _uri(path: str) -> tuple[str, bool]:
    """A URI reference for ``path``, and whether it is relative to the current folder."""
    pure = Path(path)
    if pure.is_absolute():
        try:
            relative = pure.relative_to(Path.cwd())
        except ValueError:
            return pure.as_uri(), False
        return quote(PurePath(relative).as_posix()), True
    # A URI reference: spaces, '#', '%' and '?' are percent-encoded (RFC 3986).
    return quote(PurePath(os.path.normpath(path)).as_posix()), True


def _artifact_location(path: str) -> dict[str, Any]:
    uri, relative = _uri(path)
    location: dict[str, Any] = {"uri": uri}
    if relative:
        location["uriBaseId"] = SRCROOT
    return location


def _region(start_line: int, start_col: int, end_line: int, end_col: int) -> dict[str, int]:
    return {
        "startLine": start_line,
        "startColumn": start_col,
        "endLine": end_line,
        "endColumn": end_col,
    }


def _level(code: str) -> str:
    return "error"


def _rule_descriptor(rule: type[Rule]) -> dict[str, Any]:
    from ..rule_docs import fix_summary, render

    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": f"{rule.summary}."},
        "fullDescription": {"text": _first_paragraph(rule)},
        "helpUri": rule_url(rule.code),
        "help": {"text": f"{rule.summary}. See {rule_url(rule.code)}", "markdown": render(rule)},
        "defaultConfiguration": {
            "enabled": bool(rule.default_enabled),
            "level": _level(rule.code),
        },
        "properties": {"fix": fix_summary(rule)},
    }


def _first_paragraph(rule: type[Rule]) -> str:
    """The text under ``## What it finds``, as one paragraph."""
    lines: list[str] = []
    inside = False
    for line in rule.documentation().splitlines():
        if line.startswith("## "):
            if inside:
                break
            inside = line.strip() == "## What it finds"
            continue
        if inside:
            lines.append(line.strip())
    text = " ".join(part for part in lines if part).strip()
    return text or f"{rule.summary}."


def _fixes(d: Diagnostic) -> list[dict[str, Any]]:
    if d.fix is None or not d.text_edits or d.cell is not None:
        # Notebook edits address a cell's source, not the file's lines: no artifact change.
        return []
    return [
        {
            "description": {"text": f"{d.fix.title} ({d.fix.applicability.value} fix)"},
            "artifactChanges": [
                {
                    "artifactLocation": _artifact_location(d.path),
                    "replacements": [
                        {
                            "deletedRegion": _region(
                                e.start.line, e.start.column, e.end.line, e.end.column
                            ),
                            "insertedContent": {"text": e.content},
                        }
                        for e in d.text_edits
                    ],
                }
            ],
        }
    ]


def _file_region(d: Diagnostic, files: FileLines) -> dict[str, int]:
    """The region in the file's own lines: a notebook's are the ``.ipynb`` file's, without
    columns (a cell's column is not the JSON text's)."""
    span = files.span(d)
    if span.start_column is None or span.end_column is None:
        return {"startLine": span.start_line, "endLine": span.end_line}
    return _region(span.start_line, span.start_column, span.end_line, span.end_column)


def _result(d: Diagnostic, index: dict[str, int], files: FileLines) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": d.code,
        "level": _level(d.code),
        "message": {"text": located_message(d)},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact_location(d.path),
                    "region": _file_region(d, files),
                }
            }
        ],
    }
    if d.related:
        result["relatedLocations"] = [
            {
                "id": number,
                "physicalLocation": {
                    "artifactLocation": _artifact_location(r.path),
                    "region": {"startLine": r.line},
                },
                "message": {"text": r.message},
            }
            for number, r in enumerate(d.related, start=1)
        ]
    if d.code in index:
        result["ruleIndex"] = index[d.code]
    fixes = _fixes(d)
    if fixes:
        result["fixes"] = fixes
    properties: dict[str, Any] = {"name": d.name}
    if d.cell is not None:
        properties["cell"] = d.cell
    if d.fix is not None:
        properties["fixApplicability"] = d.fix.applicability.value
    result["properties"] = properties
    return result


def document(result: RunResult) -> dict[str, Any]:
    rules = registry.all_rules()
    index = {rule.code: i for i, rule in enumerate(rules)}
    files = FileLines()
    notifications = [{"level": "error", "message": {"text": error}} for error in result.errors] + [
        {"level": "note", "message": {"text": note}} for note in result.notes
    ]
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "ema-lint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule_descriptor(rule) for rule in rules],
            }
        },
        "invocations": [
            {
                "executionSuccessful": not result.errors,
                "toolExecutionNotifications": notifications,
            }
        ],
        "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().as_uri() + "/"}},
        "columnKind": "unicodeCodePoints",
        "results": [_result(d, index, files) for d in result.diagnostics],
    }
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [run]}


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    json.dump(document(result), stream, indent=2)
    stream.write("\n")
