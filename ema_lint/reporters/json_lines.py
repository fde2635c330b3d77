"""JSON Lines: one finding per line (the ``json`` format's diagnostic objects), for tools
that stream; one-line errors follow as ``{"error": ...}`` objects."""

from __future__ import annotations

import json
from typing import TextIO

from .base import RunResult
from .json_format import diagnostic_to_dict


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    for d in result.diagnostics:
        stream.write(json.dumps(diagnostic_to_dict(d)) + "\n")
    for error in result.errors:
        stream.write(json.dumps({"error": error}) + "\n")
