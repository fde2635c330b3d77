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
from pathlib import PurePath
from typing import Any, TextIO

from ..diagnostics import Diagnostic
from . import RunResult, located_message


def _path(path: str) -> str:
    return PurePath(os.path.normpath(path)).as_posix()


def fingerprint(d: Diagnostic, occurrence: int) -> str:
    key = "\0".join((_path(d.path), d.code, str(d.cell or ""), d.message, str(occurrence)))
    return hashlib.md5(key.encode("utf-8"), usedforsecurity=False).hexdigest()


def _severity(code: str) -> str:
    return "critical" if code.startswith("EMA9") else "major"


def document(result: RunResult) -> list[dict[str, Any]]:
    seen: Counter[tuple[str, str, int | None, str]] = Counter()
    issues: list[dict[str, Any]] = []
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
                "location": {
                    "path": _path(d.path),
                    "positions": {
                        "begin": {"line": d.start.line, "column": d.start.column},
                        "end": {"line": d.end.line, "column": d.end.column},
                    },
                },
            }
        )
    return issues


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    json.dump(document(result), stream, indent=2)
    stream.write("\n")
