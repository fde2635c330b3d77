"""Whether a file the pre-filter rejected must be parsed all the same, because it imports a
module of the project that is about averaging (its ``ModelEMA`` is a class the file's own
bytes do not name as an API).

Plain Python, no libcst: the command's parent process and the flake8 plugin run it on files
whose bytes hold no trigger. It reads only the import lines, resolves them against the
project roots (memoized per folder) and scans the bytes of the files they name (memoized per
file and stat) for averaging evidence.
"""

from __future__ import annotations

import os
import re

from .resolution import module_for_path, resolve

_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*[A-Za-z_][\w.]*|\.+)[ \t]+import\b([^\n#]*)|import[ \t]+([\w.]+))",
    re.MULTILINE,
)
# What a module holding an averaging class or helper spells (its update, its shadow...).
_EVIDENCE = re.compile(
    rb"(ema|EMA|Ema|shadow|[Aa]verag|swa|SWA|teacher|polyak|\.backward\(|\.step\()"
)
_RELEVANT: dict[str, tuple[tuple[int, int], bool]] = {}
MAX_IMPORTS = 64


def _relevant(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    signature = (st.st_mtime_ns, st.st_size)
    known = _RELEVANT.get(path)
    if known is not None and known[0] == signature:
        return known[1]
    try:
        with open(path, "rb") as handle:
            found = _EVIDENCE.search(handle.read()) is not None
    except OSError:
        found = False
    _RELEVANT[path] = (signature, found)
    return found


def imported_files(path: str | None, data: bytes | str) -> list[str]:
    """The project files ``path`` (with content ``data``) imports, in order, at most
    ``MAX_IMPORTS`` import lines' worth: what its admission depends on."""
    if not path or b"import" not in (raw := data.encode() if isinstance(data, str) else data):
        return []
    if not os.path.isfile(path):
        return []
    importer = module_for_path(path)
    files: list[str] = []
    for number, match in enumerate(_IMPORT.finditer(raw)):
        if number >= MAX_IMPORTS:
            break
        module = (match.group(1) or match.group(3) or b"").decode("ascii", "replace")
        candidates = [module]
        if match.group(2):  # ``from pkg import ema``: ``ema`` may be a module
            names = re.findall(r"[A-Za-z_]\w*", match.group(2).decode("ascii", "replace"))
            joiner = "" if module.endswith(".") else "."
            candidates.extend(f"{module}{joiner}{n}" for n in names[:8] if n != "as")
        for candidate in candidates:
            found = resolve(importer, candidate)
            if found is not None and found.path not in files:
                files.append(found.path)
    return files


def about_averaging(files: list[str]) -> bool:
    """One of ``files`` (project modules) holds averaging evidence."""
    return any(_relevant(f) for f in files)


def imports_averaging(path: str | None, data: bytes | str) -> bool:
    """``path`` (with content ``data``) imports a project module about averaging."""
    return about_averaging(imported_files(path, data))
