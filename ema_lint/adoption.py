"""Adopting ema-lint on an existing codebase: ``--add-noqa`` and ``ema-lint clean``.

``--add-noqa`` writes ``# noqa: CODE`` where each current finding would look for one (the
first line of the statement that holds it), so that a codebase passes today and new
findings stand out. It is idempotent: codes already there are kept and not repeated, a
blanket ``# noqa`` is left alone, other comments on the line stay, and the line ending and
the rest of the file are kept byte for byte. Only Python files are edited (a notebook
cell's or a YAML file's line is not a Python line).
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from .diagnostics import Diagnostic
from .noqa import line_directive
from .writer import atomic_write

_EXISTING = re.compile(r"#\s*noqa:\s?(?P<codes>[A-Za-z0-9,\s-]*[A-Za-z0-9])", re.IGNORECASE)
_ENDING = re.compile(r"(\r\n|\r|\n)$")


def _with_codes(line: str, codes: list[str]) -> str:
    """``line`` (without its ending) carrying ``# noqa`` for ``codes`` too."""
    directive = line_directive(line)
    if directive is not None and directive.codes is None:
        return line  # a blanket noqa already covers them
    present = directive.codes if directive is not None else frozenset()
    missing = [c for c in codes if c.upper() not in present]
    if not missing:
        return line
    existing = _EXISTING.search(line)
    if existing is not None and directive is not None:
        merged = existing.group("codes").rstrip() + ", " + ", ".join(missing)
        return line[: existing.start("codes")] + merged + line[existing.end("codes") :]
    return f"{line.rstrip()}  # noqa: {', '.join(missing)}"


def add_noqa_to_text(text: str, by_line: dict[int, list[str]]) -> tuple[str, int]:
    """The text with the directives added, and how many lines changed."""
    lines = text.splitlines(keepends=True)
    changed = 0
    for number, codes in by_line.items():
        if not 1 <= number <= len(lines):
            continue
        raw = lines[number - 1]
        ending = _ENDING.search(raw)
        body = raw[: ending.start()] if ending else raw
        new = _with_codes(body, codes)
        if new != body:
            lines[number - 1] = new + (ending.group() if ending else "")
            changed += 1
    return "".join(lines), changed


def add_noqa(diagnostics: Iterable[Diagnostic]) -> tuple[int, list[str]]:
    """Add directives for ``diagnostics`` to their files: (lines changed, errors)."""
    by_file: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for d in diagnostics:
        if d.cell is not None or not d.path.endswith((".py", ".pyi")):
            continue
        if d.code.startswith("EMA9"):
            continue  # ema-lint's own errors and EMA910 (about noqa comments) get none
        codes = by_file[d.path][d.statement_line or d.start.line]
        if d.code not in codes:
            codes.append(d.code)
    total, errors = 0, []
    for path, by_line in by_file.items():
        try:
            data = Path(path).read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            errors.append(f"{path}: cannot add noqa: {error}")
            continue
        new, changed = add_noqa_to_text(text, dict(by_line))
        if changed:
            try:
                atomic_write(Path(path), new.encode("utf-8"))
            except OSError as error:
                errors.append(f"{path}: cannot write: {error.strerror or error}")
                continue
            total += changed
    return total, errors


def clean(cache_dir: Path) -> bool:
    """Remove the results cache folder; True if there was one."""
    if not cache_dir.exists():
        return False
    shutil.rmtree(cache_dir)
    return True
