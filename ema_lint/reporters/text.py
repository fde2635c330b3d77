"""Human output: one line per finding, fixable ones marked ``[*]``, and a closing summary."""

from __future__ import annotations

from typing import TextIO

from .base import RunResult, location_text, printable

_RESET = "\033[0m"
_BOLD = "\033[1m"
_RED = "\033[31m"
_CYAN = "\033[36m"
_YELLOW = "\033[33m"


def _paint(text: str, style: str, color: bool) -> str:
    return f"{style}{text}{_RESET}" if color else text


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _lines(result: RunResult, color: bool) -> list[str]:
    out: list[str] = []
    for d in result.diagnostics:
        marker = " " + _paint("[*]", _CYAN, color) if result.fixable(d) else ""
        out.append(
            f"{_paint(printable(location_text(d)), _BOLD, color)}: "
            f"{_paint(d.code, _BOLD + _RED, color)}{marker} {printable(d.message)}"
        )
    return out


def _success_line(result: RunResult) -> str:
    """What a run without findings ends with: success only when it checked something and
    met no error (a missing path or a mistyped command is not a pass)."""
    if result.errors:
        count = len(result.errors)
        return f"No problems found, but {_plural(count, 'error')} stopped part of the check."
    if result.files_checked == 0:
        return "No files checked: no Python, notebook or YAML file was found."
    return "All checks passed!"


def summary_lines(result: RunResult, color: bool = False) -> list[str]:
    lines: list[str] = []
    remaining = len(result.diagnostics)
    if result.fix_mode:
        if remaining == 0 and result.fixed:
            lines.append(
                f"Found {_plural(result.fixed, 'problem')} ({result.fixed} fixed, 0 remaining)."
            )
        elif remaining or result.fixed:
            total = remaining + result.fixed
            lines.append(
                f"Found {_plural(total, 'problem')} ({result.fixed} fixed, {remaining} remaining)."
            )
        else:
            lines.append(_success_line(result))
    elif remaining:
        fixable = result.fixable_count
        line = f"Found {_plural(remaining, 'problem')}"
        line += f" ({fixable} fixable with --fix)." if fixable else "."
        lines.append(line)
    else:
        lines.append(_success_line(result))
    hidden = result.hidden_unsafe_count
    if hidden:
        lines.append(
            f"No fix applied for {_plural(hidden, 'problem')} whose fix is unsafe: "
            "review and apply with --unsafe-fixes."
            if result.fix_mode
            else f"{hidden} more {'fix' if hidden == 1 else 'fixes'} available with --unsafe-fixes."
        )
    return lines


def _errors(result: RunResult, stream: TextIO, color: bool) -> None:
    for error in result.errors:
        stream.write(f"{_paint('error', _BOLD + _YELLOW, color)}: {printable(error)}\n")
    for note in result.notes:
        stream.write(f"{_paint('note', _BOLD, color)}: {note}\n")


def render_full(result: RunResult, stream: TextIO, color: bool) -> None:
    for line in _lines(result, color):
        stream.write(line + "\n")
    _errors(result, stream, color)
    for line in summary_lines(result, color):
        stream.write(line + "\n")


def render_concise(result: RunResult, stream: TextIO, color: bool) -> None:
    for line in _lines(result, color):
        stream.write(line + "\n")
    _errors(result, stream, color)
