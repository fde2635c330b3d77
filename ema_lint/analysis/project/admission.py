"""Whether a file the pre-filter rejected must be parsed all the same, because a name it
imports from the project is an averaging class or helper (its ``Smoother`` is a class the
file's own bytes do not name as an API).

Plain Python, no libcst: the command's parent process and the flake8 plugin run it on files
whose bytes hold no trigger. It reads only the import lines, resolves them against the
project roots, and looks in the imported module's bytes at the definition of each name the
file imports (or uses, for ``import pkg.mod as m``: ``m.Name``): only a definition that
spells averaging in its code (not in comments or docstrings) admits the file. Looking at
the whole module instead would admit most of a large project (any module that says
``schema`` or ``.step(`` somewhere).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .resolution import module_for_path, resolve

_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*[A-Za-z_][\w.]*|\.+)[ \t]+import\b([^\n#]*)"
    rb"|import[ \t]+([\w.]+)(?:[ \t]+as[ \t]+(\w+))?)",
    re.MULTILINE,
)
# What the definition of an averaging class or helper spells, as identifier components
# (``ModelEMA``, ``model_ema``, ``EmaV2``; not ``schema``, ``EMAIL`` or ``swap``).
EVIDENCE = re.compile(
    rb"(?<![A-Za-z\"'])ema(?![a-z\"'])|(?<![A-Z])Ema(?![a-z])|(?<![A-Z])EMA(?![A-Z]{2}|[a-z])"
    rb"|(?<![A-Za-z])swa(?![a-z])|(?<![A-Z])Swa(?![a-z])|(?<![A-Z])SWA(?![A-Z]{2}|[a-z])"
    rb"|[Aa]verag|shadow|Shadow|polyak|Polyak|teacher|Teacher|lerp"
    rb"|running_mean|running_var|reset_running_stats"
)
# Comments and docstrings (triple-quoted strings): prose, where "a weighted average of the
# noise" names no averaged weights. Evidence is looked for in what is left.
PROSE = re.compile(rb"#[^\n]*|'''.*?'''|\"\"\".*?\"\"\"", re.S)
_TOP_LEVEL = re.compile(rb"^[^\s#)\]}]", re.MULTILINE)
MAX_IMPORTS = 64
MAX_NAMES = 16
MAX_REEXPORTS = 3


@dataclass(frozen=True)
class Imported:
    """A project module a file imports, and the names it takes from it (None: the module
    as a whole, for ``from pkg import module`` and ``from mod import *``)."""

    path: str
    names: tuple[str, ...] | None


def _at_line_start(data: bytes, name: bytes, prefixes: tuple[bytes, ...]) -> int:
    """Offset of the first line that starts with one of ``prefixes`` followed by ``name``
    as a whole word, or -1. ``bytes.find`` first: a regular expression per name is slow."""
    for prefix in prefixes:
        needle = prefix + name
        at = data.find(needle)
        while at != -1:
            after = at + len(needle)
            boundary = after >= len(data) or not (
                data[after : after + 1].isalnum() or data[after] == 95
            )
            if boundary and (at == 0 or data[at - 1] == 10):
                return at
            at = data.find(needle, at + 1)
    return -1


def spells_averaging(data: bytes) -> bool:
    """``EVIDENCE`` outside comments and docstrings (a scan of the bytes first: most text
    holds no evidence at all, and then there is no prose to take out)."""
    if EVIDENCE.search(data) is None:
        return False
    return EVIDENCE.search(PROSE.sub(b" ", data)) is not None


def definition(data: bytes, name: str) -> bytes | None:
    """The bytes of the top-level ``class``/``def`` of ``name`` in ``data`` (decorators and
    the comment block above included), or None."""
    at = _at_line_start(data, name.encode(), (b"class ", b"def ", b"async def "))
    if at == -1:
        return None
    start = data.rfind(b"\n\n", 0, at)
    following = _TOP_LEVEL.search(data, at + 1)
    end = following.start() if following is not None else len(data)
    return data[max(start, 0) : end]


def reexports(data: bytes, name: str) -> bool:
    """``data`` imports ``name`` (a re-export, ``from .ema import ModelEMA``)."""
    word = name.encode()
    at = data.find(word)
    while at != -1:
        after = at + len(word)
        whole = (at == 0 or not (data[at - 1 : at].isalnum() or data[at - 1] == 95)) and (
            after >= len(data) or not (data[after : after + 1].isalnum() or data[after] == 95)
        )
        if whole:
            line = data[data.rfind(b"\n", 0, at) + 1 : at].lstrip()
            if line.startswith((b"from ", b"import ", b"from\t", b"import\t")):
                return True
            opened = data.rfind(b"import (", max(0, at - 4000), at)
            if opened != -1 and b")" not in data[opened:at]:  # in ``import (...)`` lines
                return True
        at = data.find(word, at + 1)
    return False


def imports(path: str | None, data: bytes | str) -> list[Imported]:
    """The project modules ``path`` (with content ``data``) imports, with the names."""
    if not path or b"import" not in (raw := data.encode() if isinstance(data, str) else data):
        return []
    if not os.path.isfile(path):
        return []
    importer = module_for_path(path)
    found: list[Imported] = []
    for number, match in enumerate(_IMPORT.finditer(raw)):
        if number >= MAX_IMPORTS:
            break
        if match.group(1) is not None:  # from module import names
            module = match.group(1).decode("ascii", "replace")
            listed = match.group(2)
            if b"(" in listed and b")" not in listed:  # ``import (`` over several lines
                close = raw.find(b")", match.end())
                listed = raw[match.start(2) : close if close != -1 else match.end()]
            names = _names(re.sub(rb"#[^\n]*", b"", listed))
            joiner = "" if module.endswith(".") else "."
            taken: list[str] = []
            for name in names[:MAX_NAMES]:
                submodule = resolve(importer, f"{module}{joiner}{name}")
                if submodule is not None:  # ``from pkg import ema``: a module by name
                    found.append(Imported(submodule.path, None))
                else:
                    taken.append(name)
            target = resolve(importer, module)
            if target is not None and (taken or "*" in names):
                found.append(Imported(target.path, None if "*" in names else tuple(taken)))
            continue
        module = match.group(3).decode("ascii", "replace")
        target = resolve(importer, module)
        if target is None:
            continue
        alias = (match.group(4) or match.group(3)).decode("ascii", "replace")
        used = re.findall(rb"\b" + re.escape(alias.encode()) + rb"\.([A-Za-z_]\w*)\b", raw)
        names = list(dict.fromkeys(n.decode("ascii", "replace") for n in used))
        if names:
            found.append(Imported(target.path, tuple(names[:MAX_NAMES])))
    return found


def _names(text: bytes) -> list[str]:
    listed = text.decode("ascii", "replace").replace("(", " ").replace(")", " ")
    names = []
    for part in listed.split(","):
        words = part.split()
        if words:
            names.append(words[0])
    return names


# Relevance, memoized per file (by stat signature) and name -----------------------------------
_READ: dict[str, tuple[tuple[int, int], bytes | None]] = {}
MAX_READ = 4096


def _read(path: str) -> bytes | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    signature = (st.st_mtime_ns, st.st_size)
    known = _READ.get(path)
    if known is not None and known[0] == signature:
        return known[1]
    try:
        with open(path, "rb") as handle:
            data: bytes | None = handle.read()
    except OSError:
        data = None
    if len(_READ) >= MAX_READ:
        _READ.clear()
    _READ[path] = (signature, data)
    return data


_VERDICTS: dict[tuple[str, str], tuple[bytes, bool, tuple[str, ...]]] = {}


def _name_relevant(path: str, name: str, consulted: list[str], depth: int) -> bool:
    data = _read(path)
    if data is None:
        return False
    known = _VERDICTS.get((path, name))
    if known is not None and known[0] is data:
        consulted.extend(known[2])
        return known[1]
    mine: list[str] = []
    verdict = _name_relevant_uncached(path, data, name, mine, depth)
    if len(_VERDICTS) >= 16 * MAX_READ:
        _VERDICTS.clear()
    _VERDICTS[(path, name)] = (data, verdict, tuple(mine))
    consulted.extend(mine)
    return verdict


def _name_relevant_uncached(
    path: str, data: bytes, name: str, consulted: list[str], depth: int
) -> bool:
    body = definition(data, name)
    if body is not None:
        return spells_averaging(body)
    if depth >= MAX_REEXPORTS or not reexports(data, name):
        return False
    for imported in imports_of(path, data):
        if imported.names is None or name in imported.names:
            consulted.append(imported.path)
            if _name_relevant(imported.path, name, consulted, depth + 1):
                return True
    return False


_IMPORTS: dict[str, tuple[bytes, list[Imported]]] = {}


def imports_of(path: str, data: bytes) -> list[Imported]:
    """``imports`` of a module read for a re-export, once per content."""
    known = _IMPORTS.get(path)
    if known is not None and known[0] is data:
        return known[1]
    if len(_IMPORTS) >= MAX_READ:
        _IMPORTS.clear()
    found = imports(path, data)
    _IMPORTS[path] = (data, found)
    return found


def about_averaging(imported: list[Imported], consulted: list[str] | None = None) -> bool:
    """A name ``imported`` takes from the project is an averaging class or helper (or a
    module taken whole spells averaging). ``consulted`` collects every file read."""
    seen = consulted if consulted is not None else []
    for item in imported:
        seen.append(item.path)
        if item.names is None:
            data = _read(item.path)
            if data is not None and spells_averaging(data):
                return True
            continue
        for name in item.names:
            if _name_relevant(item.path, name, seen, 0):
                return True
    return False


def imports_averaging(path: str | None, data: bytes | str) -> bool:
    """``path`` (with content ``data``) imports an averaging class or helper of the project."""
    return about_averaging(imports(path, data))
