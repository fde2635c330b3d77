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

The other direction too: a training helper whose own bytes name no average (``def
train_one_epoch(model, loader, optimizer, tracker)``) is parsed when a module of the project
that imports it calls one of its functions or classes with an argument named as averaged
(``train_one_epoch(model, loader, optimizer, model_ema)``), or bound on one line from a
name that is (``tracker = ModelEmaV2(model)``): the analysis then follows the caller's
object into the helper.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from ema_lint.analysis.syntax.vocabulary import averaged_identifier, named_not_optimizer
from ema_lint.files import read_regular
from ema_lint.prefilter import code_names, without_prose

from .resolution import (
    listed_at,
    lists,
    module_for_path,
    module_stem,
    project_files,
    project_root,
    resolve_from,
)

_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*[A-Za-z_][\w.]*|\.+)[ \t]+import\b([^\n#]*)"
    rb"|import[ \t]+([\w.]+)(?:[ \t]+as[ \t]+(\w+))?)",
    re.MULTILINE,
)
# What the definition of an averaging class or helper spells, as identifier components
# (``ModelEMA``, ``model_ema``, ``EmaV2``; not ``schema``, ``EMAIL`` or ``swap``). BatchNorm
# statistics (``running_mean``) are no such evidence: a module that imports a norm layer or
# a recalibration helper has nothing averaged to hand it unless its own bytes say so.
EVIDENCE = re.compile(
    rb"(?<![A-Za-z\"'])ema(?![a-z\"'])|(?<![A-Z])Ema(?![a-z])|(?<![A-Z])EMA(?![A-Z]{2}|[a-z])"
    rb"|(?<![A-Za-z])swa(?![a-z])|(?<![A-Z])Swa(?![a-z])|(?<![A-Z])SWA(?![A-Z]{2}|[a-z])"
    rb"|shadow|Shadow|polyak|Polyak|teacher|Teacher"
    # A ``lerp`` of weights read from a model: an average with no averaging word (``for t,
    # s in zip(self.target.parameters(), ...): t.lerp_(s, 1 - self.decay)``). A lerp of
    # latents or colours in a pipeline reads no weights.
    rb"|lerp(?=(?:.|\n){0,400}?(?:parameters|state_dict|buffers)\()"
    rb"|(?:parameters|state_dict|buffers)\((?=(?:.|\n){0,400}?lerp)"
)
# Every match of ``EVIDENCE`` starts with one of these: found by ``bytes.find`` and checked
# there, a search costs a few scans of the text instead of the alternation tried at every
# offset (about 30 ms on a 240 kB module, measured).
_EVIDENCE_STARTS = (
    b"ema",
    b"Ema",
    b"EMA",
    b"swa",
    b"Swa",
    b"SWA",
    b"shadow",
    b"Shadow",
    b"polyak",
    b"Polyak",
    b"teacher",
    b"Teacher",
    b"lerp",
    b"parameters(",
    b"state_dict(",
    b"buffers(",
)


_FOLDED_STARTS = tuple(dict.fromkeys(s.lower() for s in _EVIDENCE_STARTS))

# "Average" alone is in too much that averages no weights (BatchNorm's
# ``exponential_average_factor``, the profiler's ``key_averages``, an optimizer's
# ``grad_averaging``, a loss meter's ``running_average``): it counts with weights read or
# copied in the same text (``def moving_average(net1, net2, alpha)`` over ``parameters()``,
# ``class WeightAverager`` holding a ``deepcopy``, a subclass of ``AveragedModel``).
_AVERAGE_WORDS = (b"averag", b"Averag")
_WEIGHT_WORDS = (
    b"parameters(",
    b"state_dict(",
    b"buffers(",
    b"deepcopy",
    b"AveragedModel",
    b".data",
    b"lerp",
    b"_foreach_",
)


def has_evidence(data: bytes) -> bool:
    """``EVIDENCE.search(data) is not None``, or an average word with weights (see
    ``_AVERAGE_WORDS``), fast."""
    match = EVIDENCE.match
    folded = data.lower()  # one scan per word, not one per casing
    for start in _FOLDED_STARTS:
        at = folded.find(start)
        while at != -1:
            if match(data, at) is not None:
                return True
            at = folded.find(start, at + 1)
    return any(w in data for w in _AVERAGE_WORDS) and any(w in data for w in _WEIGHT_WORDS)


# A line that starts at the top level, with its newline: led by a literal, the pattern is
# searched for as fast as ``bytes.find`` (``^`` in multi-line mode is tried at every offset,
# seven times slower over a corpus).
_TOP_LEVEL = re.compile(rb"\n[^\s#)\]}]")
# A top-level class or function, and its name.
TOP_DEFINITION = re.compile(rb"^(?:class|def|async[ \t]+def)[ \t]+([A-Za-z_]\w*)", re.MULTILINE)
# The same after a newline: led by a literal, searched for fast (see ``_TOP_LEVEL``).
_DEFINITION_LINE = re.compile(rb"\n(class|def|async[ \t]+def)[ \t]+([A-Za-z_]\w*)")


def top_definitions(data: bytes) -> Iterator[tuple[int, bytes, bool]]:
    """(offset of the line, name, whether a class) of each top-level ``class``/``def``, in
    order: ``TOP_DEFINITION.finditer`` at a sixth of its cost over a corpus."""
    first = TOP_DEFINITION.match(data)
    if first is not None:
        yield 0, first.group(1), first.group(0).startswith(b"class")
    for match in _DEFINITION_LINE.finditer(data):
        yield match.start() + 1, match.group(2), match.group(1) == b"class"


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


# An import line naming an average (``from . import averaging``): the module hands on
# what another defines (a star import of it reaches the averaging class).
_IMPORTS_AVERAGE = re.compile(rb"^[ \t]*(?:from|import)[ \t][^\n]*[Aa]verag", re.MULTILINE)


def imports_averaging(data: bytes) -> bool:
    """``data`` has an import line that names an average (``from . import averaging``)."""
    return b"verag" in data and _IMPORTS_AVERAGE.search(data) is not None


def spells_averaging(data: bytes) -> bool:
    """``EVIDENCE`` outside comments, docstrings and messages, where "a weighted average of
    the noise" names no averaged weights (a scan of the bytes first: most text holds no
    evidence at all, and then there is no prose to take out)."""
    if not has_evidence(data):
        return False
    return has_evidence(without_prose(data))


def definition(data: bytes, name: str) -> bytes | None:
    """The bytes of the top-level ``class``/``def`` of ``name`` in ``data`` (decorators and
    the comment block above included), or None."""
    at = _at_line_start(data, name.encode(), (b"class ", b"def ", b"async def "))
    if at == -1:
        return None
    return definition_at(data, at)


def definition_at(data: bytes, at: int) -> bytes:
    """The bytes of the top-level definition whose ``class``/``def`` line starts at ``at``
    (see ``definition``)."""
    start = data.rfind(b"\n\n", 0, at)
    following = _TOP_LEVEL.search(data, at)
    end = following.start() + 1 if following is not None else len(data)
    return data[max(start, 0) : end]


def _words_at(data: bytes, word: bytes) -> Iterator[int]:
    """Offsets of ``word`` as a whole identifier (``bytes.find``: a regular expression per
    name, with no literal to start from, scans every offset)."""
    at = data.find(word)
    while at != -1:
        after = at + len(word)
        if (at == 0 or not _is_word_byte(data[at - 1])) and (
            after >= len(data) or not _is_word_byte(data[after])
        ):
            yield at
        at = data.find(word, after)


def _is_word_byte(byte: int) -> bool:
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122


def reexports(data: bytes, name: str) -> bool:
    """``data`` imports ``name`` (a re-export, ``from .ema import ModelEMA``)."""
    word = name.encode()
    for at in _words_at(data, word):
        if data[at - 1 : at] == b"." or data[at + len(word) : at + len(word) + 1] == b".":
            continue  # a component of a module's path (``from matplotlib.colors import``)
        line = data[data.rfind(b"\n", 0, at) + 1 : at].lstrip()
        if line.startswith((b"from ", b"from\t")):
            if b"import" in line:  # after ``import``: a name taken, not the module
                return True
            continue
        if line.startswith((b"import ", b"import\t")):
            return True
        opened = data.rfind(b"import (", max(0, at - 4000), at)
        if opened != -1 and b")" not in data[opened:at]:  # in ``import (...)`` lines
            return True
    return False


def imports(path: str | None, data: bytes | str) -> list[Imported]:
    """The project modules ``path`` (with content ``data``) imports, with the names."""
    if not path or b"import" not in (raw := data.encode() if isinstance(data, str) else data):
        return []
    if not os.path.isfile(path):
        return []
    importer = module_for_path(path)
    where = (os.path.dirname(importer.path), importer.package, importer.path)
    found: list[Imported] = []
    for number, match in enumerate(import_lines(raw)):
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
                submodule = resolve_from(*where, f"{module}{joiner}{name}")
                if submodule is not None:  # ``from pkg import ema``: a module by name
                    found.append(Imported(submodule.path, None))
                else:
                    taken.append(name)
            target = resolve_from(*where, module)
            if target is not None and (taken or "*" in names):
                found.append(Imported(target.path, None if "*" in names else tuple(taken)))
            continue
        module = match.group(3).decode("ascii", "replace")
        target = resolve_from(*where, module)
        if target is None:
            continue
        alias = (match.group(4) or match.group(3)).decode("ascii", "replace")
        used = re.findall(rb"\b" + re.escape(alias.encode()) + rb"\.([A-Za-z_]\w*)\b", raw)
        names = list(dict.fromkeys(n.decode("ascii", "replace") for n in used))
        if names:
            found.append(Imported(target.path, tuple(names[:MAX_NAMES])))
    return found


def import_lines(data: bytes) -> Iterator[re.Match[bytes]]:
    """``_IMPORT.finditer(data)``, tried only at the lines that hold the word ``import``
    (found by ``bytes.find``): a pattern anchored at every line start costs about twenty
    times more on a corpus, where most lines import nothing."""
    at = data.find(b"import")
    tried = -1
    while at != -1:
        start = data.rfind(b"\n", 0, at) + 1
        if start != tried:
            tried = start
            match = _IMPORT.match(data, start)
            if match is not None:
                yield match
        at = data.find(b"import", at + 6)


def _names(text: bytes) -> list[str]:
    listed = text.decode("ascii", "replace").replace("(", " ").replace(")", " ")
    names = []
    for part in listed.split(","):
        words = part.split()
        if words:
            names.append(words[0])
    return names


# Relevance, memoized per file (by stat signature) and name -----------------------------------
Signature = tuple[int, int]  # (mtime_ns, size): a file's version, as the memos know it
_READ: dict[str, tuple[Signature, bytes | None]] = {}
_HELD = [0]  # bytes held in _READ
MAX_READ = 4096
# The bytes of the files read last are held (the file a run summarises, then asks about
# again); beyond this, the oldest are let go and read again if asked. The memos below are
# kept by stat signature, not by the bytes: holding every project file read (38 MB for
# the benchmark corpus) in each worker of a run cost as much memory as the project.
READ_BUDGET = 4 << 20


def read_signed(path: str, keep: bool = True) -> tuple[Signature, bytes | None] | None:
    """(stat signature, bytes) of ``path`` as it is on disk now (bytes None: unreadable);
    None when it cannot be stat'ed. ``keep=False``: a scan that will not come back for the
    bytes (the import lines of every project file): they are not held."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    signature = (st.st_mtime_ns, st.st_size)
    known = _READ.get(path)
    if known is not None and known[0] == signature:
        if keep:  # most recently used: let go last
            del _READ[path]
            _READ[path] = known
        return known
    data: bytes | None
    try:
        data = read_regular(path)
    except OSError:
        data = None
    if not keep:
        return signature, data
    if known is not None:
        _HELD[0] -= len(known[1] or b"")
        del _READ[path]
    _READ[path] = (signature, data)
    _HELD[0] += len(data or b"")
    while _READ and (_HELD[0] > READ_BUDGET or len(_READ) > MAX_READ):
        oldest = next(iter(_READ))
        if oldest == path:
            break
        _HELD[0] -= len(_READ.pop(oldest)[1] or b"")
    return signature, data


def read_file(path: str, keep: bool = True) -> bytes | None:
    """The bytes of ``path`` as they are on disk now, shared with the project model; None
    when it cannot be read. ``keep``: see ``read_signed``."""
    found = read_signed(path, keep)
    return None if found is None else found[1]


def _token(path: str, data: bytes) -> Signature | None:
    """The signature of ``data`` when it is the version of ``path`` ``read_file`` holds;
    None for other bytes (an unsaved buffer, a version let go): those are not memoized."""
    known = _READ.get(path)
    return known[0] if known is not None and known[1] is data else None


_VERDICTS: dict[tuple[str, str], tuple[Signature, bool, tuple[str, ...]]] = {}


def _name_relevant(path: str, name: str, consulted: list[str], depth: int) -> bool:
    found = read_signed(path)
    if found is None or found[1] is None:
        return False
    signature, data = found
    known = _VERDICTS.get((path, name))
    if known is not None and known[0] == signature:
        consulted.extend(known[2])
        return known[1]
    mine: list[str] = []
    verdict = _name_relevant_uncached(path, data, name, mine, depth)
    if len(_VERDICTS) >= 16 * MAX_READ:
        _VERDICTS.clear()
    _VERDICTS[(path, name)] = (signature, verdict, tuple(mine))
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


_T = TypeVar("_T")


def _per_content(
    memo: dict[str, tuple[Signature, _T]],
    path: str,
    data: bytes,
    compute: Callable[[], _T],
    limit: int = MAX_READ,
) -> _T:
    """``compute()`` once per file version (``data`` as ``read_file`` gave it: other
    bytes are computed each time, not memoized), for at most ``limit`` files."""
    token = _token(path, data)
    if token is None:
        return compute()
    known = memo.get(path)
    if known is not None and known[0] == token:
        return known[1]
    if len(memo) >= limit:
        memo.clear()
    found = compute()
    memo[path] = (token, found)
    return found


_IMPORTS: dict[str, tuple[Signature, list[Imported]]] = {}
_SPELLS: dict[str, tuple[Signature, bool]] = {}


def _module_spells_averaging(path: str, data: bytes) -> bool:
    """``spells_averaging`` of a module taken whole, once per content (every file of a
    package that says ``from . import utils`` asks it of the same module)."""
    return _per_content(
        _SPELLS, path, data, lambda: spells_averaging(data) or imports_averaging(data)
    )


_CODE: dict[str, tuple[Signature, bytes]] = {}
MAX_CODE = 256  # each entry is a copy of a file's code: a few, not the project's


def code_of(path: str, data: bytes) -> bytes:
    """``without_prose(data)`` of a module, once per content (a module is asked whether
    its code calls each function whose callers are looked up)."""
    return _per_content(_CODE, path, data, lambda: without_prose(data), MAX_CODE)


def imports_of(path: str, data: bytes) -> list[Imported]:
    """``imports`` of a module read for a re-export, once per content."""
    return _per_content(_IMPORTS, path, data, lambda: imports(path, data))


def about_averaging(imported: list[Imported], consulted: list[str] | None = None) -> bool:
    """A name ``imported`` takes from the project is an averaging class or helper (or a
    module taken whole spells averaging). ``consulted`` collects every file read."""
    seen = consulted if consulted is not None else []
    for item in imported:
        seen.append(item.path)
        if item.names is None:
            data = read_file(item.path)
            if data is not None and _module_spells_averaging(item.path, data):
                return True
            continue
        for name in item.names:
            if _name_relevant(item.path, name, seen, 0):
                return True
    return False


def project_admits(path: str | None, data: bytes | str, consulted: list[str] | None = None) -> bool:
    """``path`` (with content ``data``) imports an averaging class or helper of the project,
    or a module of the project hands one of its functions an averaging object.
    ``consulted`` collects every file read, for the verdict's cache entry."""
    if about_averaging(imports(path, data), consulted):
        return True
    return receives_averaging(path, data, consulted)


# The other direction: callers that hand this module an averaging object ---------------------
# Only a module that trains (or defines a Lightning step) can run an average's update
# between a backward pass and an optimizer step; other rules judge a helper at its call.


def trains(data: bytes) -> bool:
    """``data``'s code (not its comments or docstrings) runs a backward pass (not an
    autograd Function's own), defines a Lightning ``training_step`` or calls ``.step(`` on
    something not named as a scheduler (an optimizer, ``scaler.step(optimizer)``, a
    receiver it cannot name). A receiver named as a scheduler steps no weights (a
    diffusion pipeline's ``self.scheduler.step(noise_pred, t, latents)``)."""
    # The bytes first (most files say none of it); prose is taken out only to confirm.
    return _trains_in(data) and _trains_in(without_prose(data))


def _trains_in(text: bytes) -> bool:
    if b"def training_step" in text:
        return True
    at = text.find(b"backward(")
    while at != -1:
        if text[max(0, at - 4) : at] != b"def ":  # not an autograd Function's own backward
            return True
        at = text.find(b"backward(", at + 1)
    at = text.find(b".step(")
    while at != -1:
        # The receiver's name, read backwards (a regular expression anchored on nothing
        # would be tried at every identifier of the file): ``self.scheduler``, ``opt()``.
        end = at
        while end > 0 and text[end - 1] in b" \t":
            end -= 1
        if text[end - 2 : end] == b"()":
            end -= 2
        start = end
        while start > 0 and _is_word_byte(text[start - 1]):
            start -= 1
        if start == end or not named_not_optimizer(text[start:end].decode("ascii")):
            return True
        at = text.find(b".step(", at + 1)
    return False


_WORDS = re.compile(rb"[A-Za-z_]\w*")
MAX_CALLERS = 64
MAX_ARGUMENTS = 2000
_IMPORTERS: dict[str, dict[bytes, list[str]]] = {}
_IMPORT_WORDS: dict[str, frozenset[bytes]] = {}  # what the index holds of each file


def _import_words(data: bytes | None) -> frozenset[bytes]:
    if data is None or b"import" not in data:
        return frozenset()
    words: set[bytes] = set()
    for match in import_lines(data):
        words.update(_WORDS.findall(match.group(0)))
    return frozenset(words)


def _importers_by_word(base: str) -> dict[bytes, list[str]]:
    """Every identifier of the project's import lines, with the files that spell it there:
    built once per project root, so asking who imports a module costs no scan."""
    found = _IMPORTERS.get(base)
    if found is not None:
        return found
    found = {}
    for path in project_files(base):
        words = _IMPORT_WORDS[path] = _import_words(read_file(path, keep=False))
        for word in words:
            found.setdefault(word, []).append(path)
    _IMPORTERS[base] = found
    return found


def file_changed(path: str) -> frozenset[bytes]:
    """Bring the import index up to date with one file as it is on disk now (written,
    created or removed), without a scan of the project; returns the words of its import
    lines before and after, the modules whose importers may have changed."""
    data = read_file(path) if os.path.isfile(path) else None
    before = _IMPORT_WORDS.get(path, frozenset())
    after = _import_words(data)
    for base, index in _IMPORTERS.items():
        if not lists(base, path):
            continue
        for word in before - after:
            holders = index.get(word)
            if holders is not None and path in holders:
                holders.remove(path)
        for word in after - before:
            holders = index.setdefault(word, [])
            if path not in holders:
                bisect.insort(holders, path)
    if data is None:
        _IMPORT_WORDS.pop(path, None)
    else:
        _IMPORT_WORDS[path] = after
    return before | after


def linked(path: str, words: frozenset[bytes], other: str) -> bool:
    """``other`` is a module whose name ``words`` (the import lines of ``path``) spell, or
    a file whose import lines spell the name of ``path``."""
    if other == path:
        return False
    if module_stem(other).encode() in words:
        return True
    known = _IMPORT_WORDS.get(other)
    if known is None:
        known = _import_words(read_file(other, keep=False))
    return module_stem(path).encode() in known


# A result that read a module's importers holds while no file of the project that could
# import the module has changed since they were listed: the key records when, and a later
# run checks only the files changed since then (their change times, no reading of the rest).
IMPORTERS = "importers|"
CHANGE_MARGIN = 2.0  # seconds: a file changed just before the listing is checked again


def importers_key(path: str) -> str:
    """The dependency of a lint on the project files that import ``path`` (its callers)."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    base = project_root(folder) or folder
    return f"{IMPORTERS}{listed_at(base) - CHANGE_MARGIN:.3f}|{path}"


# By project root: the change times of its files, sorted, and when they were taken.
_CHANGES: dict[str, tuple[list[int], list[str], float]] = {}


def _changed_since(base: str, since: float) -> list[str]:
    """The project files whose change time is ``since`` or later (stat once per process)."""
    known = _CHANGES.get(base)
    if known is None:
        files = project_files(base)
        taken = min(time.time(), listed_at(base))  # a file created after it was listed
        timed: list[tuple[int, str]] = []
        for other in files:
            try:
                timed.append((os.stat(other).st_ctime_ns, other))
            except OSError:
                continue
        timed.sort()
        known = _CHANGES[base] = ([t for t, _ in timed], [p for _, p in timed], taken)
    times, paths, _ = known
    return paths[bisect.bisect_left(times, int(since * 1e9)) :]


def _parse(key: str) -> tuple[float, str, str] | None:
    """(moment, module path, project root) of an importers key."""
    _, _, rest = key.partition(IMPORTERS)
    since, _, path = rest.partition("|")
    try:
        moment = float(since)
    except ValueError:
        return None
    folder = os.path.dirname(path)
    return moment, path, project_root(folder) or folder


def importers_unchanged(key: str) -> bool:
    """No file of the project changed since ``key`` was made spells the module's name
    (the only way a file can come to import it, or call what it imports from it)."""
    parsed = _parse(key)
    if parsed is None:
        return False
    moment, path, base = parsed
    stem = module_stem(path).encode()
    for other in _changed_since(base, moment):
        if other == path:
            continue
        data = read_file(other, keep=False)
        if data is not None and stem in data and next(_words_at(data, stem), None) is not None:
            return False
    return True


def refreshed_key(key: str) -> str | None:
    """A key that holds what ``key`` holds, made now, when checking ``key`` had to read
    files changed since it was made (else None): stored back, the next run reads none of
    them again. Only for a key ``importers_unchanged`` just found to hold."""
    parsed = _parse(key)
    if parsed is None:
        return None
    moment, path, base = parsed
    if not [p for p in _changed_since(base, moment) if p != path]:
        return None
    taken = _CHANGES[base][2] - CHANGE_MARGIN
    return f"{IMPORTERS}{taken:.3f}|{path}" if taken > moment else None


def _arguments(data: bytes, start: int) -> bytes:
    """The bytes of a call's arguments from the offset of its ``(``, to the closing one."""
    depth, end = 0, min(len(data), start + MAX_ARGUMENTS)
    for at in range(start, end):
        char = data[at]
        if char in b"([{":
            depth += 1
        elif char in b")]}":
            depth -= 1
            if depth == 0:
                return data[start + 1 : at]
    return data[start + 1 : end]


# ``= pkg.ModelEmaV2(``: the name of the class or function a value is made by.
_MADE_BY = re.compile(rb"=(?!=)[ \t]*(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)[ \t]*\(")


def _bound_from_averaging(data: bytes, name: bytes) -> bool:
    """A line ``name = Maker(...)`` whose maker names an average (``tracker =
    ModelEmaV2(model)``, ``swa = AveragedModel(model)``)."""
    for at in _words_at(data, name):
        line_start = data.rfind(b"\n", 0, at) + 1
        if data[line_start:at].strip(b" \t"):
            continue
        line_end = data.find(b"\n", at)
        rest = data[at + len(name) : line_end if line_end != -1 else len(data)].lstrip(b" \t")
        made = _MADE_BY.match(rest)
        if made is not None and averaged_identifier(made.group(1).decode("ascii")):
            return True
    return False


def _averaged_argument(data: bytes, arguments: bytes) -> bool:
    for name in code_names(arguments):
        if averaged_identifier(name.decode("ascii")) or _bound_from_averaging(data, name):
            return True
    return False


_IDENTIFIERS: dict[str, tuple[Signature, frozenset[bytes]]] = {}


def _identifiers(path: str, data: bytes) -> frozenset[bytes]:
    """The identifiers of a module, once per content (a caller is asked about many modules)."""
    return _per_content(_IDENTIFIERS, path, data, lambda: frozenset(_WORDS.findall(data)))


def _hands_averaging(path: str, data: bytes, names: list[bytes]) -> bool:
    """``data`` calls one of ``names`` with an averaged argument."""
    spelled = _identifiers(path, data)
    for name in names:
        if name not in spelled:
            continue
        for at in _words_at(data, name):
            after = at + len(name)
            while after < len(data) and data[after] in b" \t":
                after += 1
            if data[after : after + 1] == b"(" and _averaged_argument(
                data, _arguments(data, after)
            ):
                return True
    return False


def receives_averaging(
    path: str | None, data: bytes | str, consulted: list[str] | None = None
) -> bool:
    """A module of the project that imports ``path`` calls one of its top-level functions
    or classes with an averaging object (see the module's docstring)."""
    raw = data.encode() if isinstance(data, str) else data
    if not path or not trains(raw) or not os.path.isfile(path):
        return False
    names = list(dict.fromkeys(name for _, name, _ in top_definitions(raw)))
    if not names:
        return False
    path = os.path.abspath(path)
    stem = module_stem(path)
    folder = os.path.dirname(path)
    base = project_root(folder) or folder
    seen = consulted if consulted is not None else []
    importers = _importers_by_word(base).get(stem.encode(), [])
    seen.append(importers_key(path))  # a new importer may hand it an average
    for other in importers[:MAX_CALLERS]:
        if other == path:
            continue
        caller = read_file(other)
        if caller is None:
            continue
        seen.append(other)
        if _hands_averaging(other, caller, names):
            return True
    return False


def forget() -> None:
    """Forget the import index (the files may have changed)."""
    _IMPORTERS.clear()
    _IMPORT_WORDS.clear()
    _IDENTIFIERS.clear()
    _CHANGES.clear()
