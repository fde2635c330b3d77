"""GitLab code quality report (``artifacts:reports:codequality``).

A JSON array of issues: ``description``, ``check_name``, ``fingerprint``, ``severity`` and
``location`` (``path`` and ``positions``). The fingerprint must stay the same while a
finding stays, so that GitLab can tell new findings from old ones in a merge request: it
hashes the path, the code, the cell and the message (which names the value), never the
line number, plus a counter for identical findings in one file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path, PurePath
from typing import Any, TextIO

from .. import registry
from ..diagnostics import Diagnostic
from .base import FileLines, RunResult, located_message, repository_path, repository_root


def _path(path: str) -> str:
    return PurePath(os.path.normpath(path)).as_posix()


def _location(d: Diagnostic, files: FileLines, root: Path | None) -> dict[str, Any]:
    """Path relative to the repository; a notebook's lines are the ``.ipynb`` file's."""
    span = files.span(d)
    location: dict[str, Any] = {"path": repository_path(d.path, root)}
    if span.start_column is None or span.end_column is None:
        location["lines"] = {"begin": span.start_line, "end": span.end_line}
    else:
        location["positions"] = {
            "begin": {"line": span.start_line, "column": span.start_column},
            "end": {"line": span.end_line, "column": span.end_column},
        }
    return location


def fingerprint(d: Diagnostic, occurrence: int) -> str:
    key = "\0".join((_path(d.path), d.code, str(d.cell or ""), d.message, str(occurrence)))
    return hashlib.md5(key.encode("utf-8"), usedforsecurity=False).hexdigest()


def _severity(code: str) -> str:
    return "critical" if registry.is_internal(code) else "major"


def document(result: RunResult) -> list[dict[str, Any]]:
    seen: Counter[tuple[str, str, int | None, str]] = Counter()
    issues: list[dict[str, Any]] = []
    files = FileLines()
    root = repository_root()
    for d in result.diagnostics:
        key = (d.path, d.code, d.cell, d.message)
        occurrence = seen[key]
        seen[key] += 1
        issues.append(
            {
                "type": "issue",
                "description": f"{d.code} {located_message(d)}",
                "check_name": f"{d.code} {d.name}",
                "fingerprint": fingerprint(d, occurrence),
                "severity": _severity(d.code),
                "categories": ["Bug Risk"],
                "location": _location(d, files, root),
            }
        )
    return issues


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    json.dump(document(result), stream, indent=2)
    stream.write("\n")
