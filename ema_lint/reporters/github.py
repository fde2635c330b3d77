"""GitHub Actions workflow commands: one annotation per finding, shown on the pull request.

``::error file=F,line=L,col=C,endLine=L2,endColumn=C2,title=EMA101::message``. Escaping
follows the Actions toolkit (``@actions/core`` ``command.ts``): in the message ``%``, CR
and LF are percent-encoded; in property values ``:`` and ``,`` are too. Paths are relative
to the repository's root and lines are the file's own (a notebook's ``.ipynb`` lines);
``col``/``endColumn`` are given only for a range on one line, as GitHub reads them.
"""

from __future__ import annotations

from typing import TextIO

from .base import FileLines, RunResult, located_message, repository_path, repository_root


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    files = FileLines()
    root = repository_root()
    for d in result.diagnostics:
        span = files.span(d)
        properties = [("file", repository_path(d.path, root)), ("line", str(span.start_line))]
        one_line = span.start_line == span.end_line
        if one_line and span.start_column is not None:
            properties.append(("col", str(span.start_column)))
        properties.append(("endLine", str(span.end_line)))
        if one_line and span.end_column is not None:
            properties.append(("endColumn", str(span.end_column)))
        properties.append(("title", f"{d.code} ({d.name})"))
        props = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
        stream.write(f"::error {props}::{escape_data(located_message(d))}\n")
    for error in result.errors:
        stream.write(f"::error title=ema-lint::{escape_data(error)}\n")
    for note in result.notes:
        stream.write(f"::notice title=ema-lint::{escape_data(note)}\n")
