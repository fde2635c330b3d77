"""GitHub Actions workflow commands: one annotation per finding, shown on the pull request.

``::error file=F,line=L,col=C,endLine=L2,endColumn=C2,title=EMA101::message``. Escaping
follows the Actions toolkit (``@actions/core`` ``command.ts``): in the message ``%``, CR
and LF are percent-encoded; in property values ``:`` and ``,`` are too.
"""

from __future__ import annotations

from typing import TextIO

from . import RunResult, located_message


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(result: RunResult, stream: TextIO, color: bool) -> None:
    for d in result.diagnostics:
        properties = [
            ("file", d.path),
            ("line", str(d.start.line)),
            ("col", str(d.start.column)),
            ("endLine", str(d.end.line)),
            ("endColumn", str(d.end.column)),
            ("title", f"{d.code} ({d.name})"),
        ]
        props = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
        stream.write(f"::error {props}::{escape_data(located_message(d))}\n")
    for error in result.errors:
        stream.write(f"::error title=ema-lint::{escape_data(error)}\n")
    for note in result.notes:
        stream.write(f"::notice title=ema-lint::{escape_data(note)}\n")
