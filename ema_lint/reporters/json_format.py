"""Machine output: a documented, versioned JSON document (see docs/output-formats.md).

Schema version 1::

    {"version": 1, "ema_lint_version": "0.1.0",
     "diagnostics": [{"code", "name", "message", "path", "cell",
                      "location": {"line", "column"}, "end_location": {"line", "column"},
                      "noqa_line", "url",
                      "fix": null | {"applicability": "safe"|"unsafe", "message",
                                     "edits": [{"location", "end_location", "content"}]}}],
     "errors": ["one-line error", ...], "notes": ["one-line note", ...],
     "summary": {"files_checked", "problems", "fixable", "fixed"}}

Lines and columns are 1-based; columns count characters. For a notebook, ``cell`` is the
1-based index of the cell in the notebook and lines count from the cell's first line; for
other files ``cell`` is null. Fix edits use the same coordinates.
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from .._version import __version__
from ..diagnostics import Diagnostic
from .base import RunResult, rule_url

SCHEMA_VERSION = 1


def _position(line: int, column: int) -> dict[str, int]:
    return {"line": line, "column": column}


def diagnostic_to_dict(d: Diagnostic) -> dict[str, Any]:
    fix: dict[str, Any] | None = None
    if d.fix is not None:
        fix = {
            "applicability": d.fix.applicability.value,
            "message": d.fix.title,
            "edits": [
                {
                    "location": _position(e.start.line, e.start.column),
                    "end_location": _position(e.end.line, e.end.column),
                    "content": e.content,
                }
                for e in (d.text_edits or ())
            ],
        }
    return {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "path": d.path,
        "cell": d.cell,
        "location": _position(d.start.line, d.start.column),
        "end_location": _position(d.end.line, d.end.column),
        "noqa_line": d.statement_line or d.start.line,
        "url": rule_url(d.code),
        "fix": fix,
        # Other places the finding rests on: the use of a value reported where it is
        # written, the class or caller another file told of.
        "related": [{"path": r.path, "line": r.line, "message": r.message} for r in d.related],
    }


def document(result: RunResult) -> dict[str, Any]:
    return {
        "version": SCHEMA_VERSION,
        "ema_lint_version": __version__,
        "diagnostics": [diagnostic_to_dict(d) for d in result.diagnostics],
        "errors": list(result.errors),
        "notes": list(result.notes),
        "summary": {
            "files_checked": result.files_checked,
            "problems": len(result.diagnostics),
            "fixable": result.fixable_count,
            "fixed": result.fixed,
        },
    }


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    json.dump(document(result), stream, indent=2)
    stream.write("\n")
