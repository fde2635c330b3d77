"""Running the ema-lint command line over many files, one process per batch.

The benchmark measures ema-lint as a user meets it: the CLI with ``--isolated --no-cache``,
JSON output (concise as a fallback for versions without it). Files are passed by name, so
each finding keeps its file; batching many files into one process keeps the run fast.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

BATCH = 400
_CONCISE_RE = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<code>[A-Z]+\d+) (?P<msg>.*)$"
)


@dataclass(frozen=True)
class Finding:
    """One diagnostic: ``file`` is the key of the file (relative to its root)."""

    file: str
    line: int
    col: int
    code: str
    message: str = ""
    anchor: str = ""
    cell: int | None = None


def default_command() -> list[str]:
    """``python -m ema_lint`` from this interpreter, else ``ema-lint`` on PATH."""
    try:
        import importlib.util

        if importlib.util.find_spec("ema_lint") is not None:
            return [sys.executable, "-m", "ema_lint"]
    except (ImportError, ValueError):
        pass
    return ["ema-lint"]


def _walk_flags(command: list[str]) -> list[str]:
    """``--no-respect-gitignore`` where this ema-lint has it: the ecosystem packages sit in
    a git-ignored cache folder, and a walk that honours .gitignore would skip them all."""
    probe = subprocess.run([*command, "check", "--help"], capture_output=True, text=True)
    return ["--no-respect-gitignore"] if "--no-respect-gitignore" in probe.stdout else []


def parse_command(text: str | None) -> list[str]:
    return shlex.split(text) if text else default_command()


def normalize_anchor(text: str) -> str:
    """A line's text with whitespace collapsed: the ledger's line-independent key."""
    return " ".join(text.split())


def line_text(path: Path, line: int, cell: int | None = None) -> str:
    """The text of ``line`` (1-based) of a file, or of a notebook cell's source."""
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    if path.suffix == ".ipynb":
        try:
            cells = [c for c in json.loads(raw).get("cells", [])]
            src = cells[cell - 1 if cell else 0].get("source", "") if cells else ""
            raw = "".join(src) if isinstance(src, list) else src
        except (ValueError, IndexError, AttributeError, TypeError):
            return ""
    lines = raw.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _key(path: str, roots: list[tuple[Path, str]]) -> tuple[str, Path]:
    p = Path(path).resolve()
    for root, prefix in roots:
        try:
            rel = p.relative_to(root).as_posix()
        except ValueError:
            continue
        return (prefix + rel, p)
    return (p.as_posix(), p)


def _parse_output(out: str) -> list[dict]:
    out = out.strip()
    if not out:
        return []
    if out.startswith("{") or out.startswith("["):
        data = json.loads(out)
        diags = data.get("diagnostics", []) if isinstance(data, dict) else data
        return [
            {
                "path": d.get("path") or d.get("filename", ""),
                "line": int((d.get("location") or {}).get("line", 0) or d.get("line", 0)),
                "col": int((d.get("location") or {}).get("column", 0) or d.get("column", 0)),
                "code": d.get("code", ""),
                "message": d.get("message", ""),
                "cell": d.get("cell"),
            }
            for d in diags
        ]
    rows = []
    for line in out.splitlines():
        m = _CONCISE_RE.match(line)
        if m:
            rows.append(
                {
                    "path": m["path"],
                    "line": int(m["line"]),
                    "col": int(m["col"]),
                    "code": m["code"],
                    "message": m["msg"],
                    "cell": None,
                }
            )
    return rows


def run(
    paths: list[Path],
    roots: list[tuple[Path, str]],
    command: list[str] | None = None,
    errors: list[str] | None = None,
) -> list[Finding]:
    """Lint ``paths`` (files or folders) in batches; findings keyed by ``roots``.

    ``roots`` is a list of (folder, prefix): a finding in ``folder/x.py`` gets the key
    ``prefix + 'x.py'``. Messages of a failing run go to ``errors``.
    """
    command = command or default_command()
    extra = _walk_flags(command)
    roots = [(r.resolve(), p) for r, p in roots]
    found: list[Finding] = []
    env = dict(os.environ)
    for start in range(0, len(paths), BATCH):
        batch = [str(p) for p in paths[start : start + BATCH]]
        rows = None
        for fmt in ("json", "concise"):
            proc = subprocess.run(
                [
                    *command,
                    "check",
                    "--isolated",
                    "--no-cache",
                    "--exit-zero",
                    "--output-format",
                    fmt,
                    *extra,
                    *batch,
                ],
                capture_output=True,
                text=True,
                env=env,
            )
            try:
                rows = _parse_output(proc.stdout)
            except ValueError:
                rows = None
            if rows is not None and (proc.returncode == 0 or rows):
                break
            if errors is not None:
                errors.append(
                    f"ema-lint {fmt} exited {proc.returncode}: {proc.stderr.strip()[:300]}"
                )
        for r in rows or []:
            key, real = _key(r["path"], roots)
            text = line_text(real, r["line"], r["cell"])
            found.append(
                Finding(
                    key,
                    r["line"],
                    r["col"],
                    r["code"],
                    r["message"],
                    normalize_anchor(text),
                    r["cell"],
                )
            )
    return found
