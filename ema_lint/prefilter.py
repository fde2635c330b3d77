"""Skip files that cannot hold a finding before parsing them.

Each rule declares trigger tokens (``Rule.triggers``): at least one of them appears in the
text of every file the rule can report on. The pre-filter of a run is the union of the
enabled rules' triggers, so a rule added to ``ema_lint/rules/`` is taken into account
without any change here. A trigger is one of:

- plain ``bytes``: a literal substring (``b"update_bn"``, ``b"ModelEmaV2"``);
- ``identifier("EMA")``: a whole identifier, not part of a longer one (``EMA``, not
  ``SCHEMA`` or ``EMAIL``): enough for an API that is found through its import;
- ``component("ema")``: an identifier *component* in any casing, identifiers being split
  at underscores, digits and camelCase humps (``model_ema``, ``ema2``, ``ModelEmaV2``,
  ``EMAModel``, ``USE_EMA``; not ``schema``, ``remain``, ``Emacs`` or ``EMAIL``). A rule
  that relies on it decides what an EMA name is with :func:`identifier_components` (or a
  stricter test), so the filter stays sound by construction.
- ``names(test, words)``: some identifier of the file passes ``test``, the very function a
  rule's analysis applies to names (``averaged_identifier``: ``ema_model``, ``encoder_k``,
  ``target_net``). ``words`` are the gates: every identifier ``test`` accepts holds one of
  them in lower, Title or UPPER case, and only a file holding one has its identifiers
  tested. For evidence that is a *combination* of words inside one name, which literal
  triggers can only approximate with the words alone (``target`` is in every file with a
  loss; ``target_net`` is rare).

A rule may also declare ``trigger_groups``: conjunctions for evidence that is common alone
and rare together (a weight method such as ``parameters`` AND a word for an average such as
``ema``). A file matches a group when it holds a trigger of every set of the group; the
first set is tested first, so it should be the rarer one.

Matching is two-stage, because in a real training library almost no file holds a trigger
and all the cost there is the scan. First the *gates*: the fewest literal substrings such
that every trigger contains one. Every gate of the union and of its groups (about a hundred)
is looked for in ONE pass over the file, by an Aho-Corasick automaton compiled once per
filter (``ahocorasick_rs``; in CPython a regular-expression alternation is ten to fifty
times slower than even one ``bytes.__contains__`` per gate, measured, and that is the
fallback when the automaton is not installed). A gate that is a trigger itself settles the
question; otherwise only the triggers attached to a gate that is present are tested
exactly, identifier and component triggers with expressions that start with their literal
(so the regex engine's fast prefix search runs). Matching works on bytes: text (the flake8
plugin's, the editor's) is matched through its UTF-8 encoding, the spelling of the file.
Literal triggers count anywhere (``# noqa`` is a comment); a name test reads the code's
identifiers and those of name-like strings, not comments, docstrings or messages.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Callable, Iterable
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a filter is built from rule classes or from their manifest entries
    from .rule import Rule


class Identifier(bytes):
    """A trigger matching a whole identifier (see :func:`identifier`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"identifier({self.decode()!r})"


class Component(bytes):
    """A trigger matching an identifier component in any casing (see :func:`component`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"component({self.decode()!r})"


class Names(bytes):
    """A trigger matching a file with an identifier that passes a test (see :func:`names`).

    Its bytes are ``module:function`` of the test, which names it in fingerprints."""

    __slots__ = ()

    @property
    def test(self) -> Callable[[str], bool]:
        return _name_test(self)[0]

    @property
    def words(self) -> tuple[str, ...]:
        return _name_test(self)[1]

    def __repr__(self) -> str:
        return f"names({self.decode()}, {', '.join(self.words)})"


_NAME_TESTS: dict[bytes, tuple[Callable[[str], bool], tuple[str, ...]]] = {}
_CODE_ONLY = "#code"


def names(test: Callable[[str], bool], words: Iterable[str], strings: bool = True) -> Names:
    """Trigger on an identifier for which ``test`` is true; ``words`` gate the test.

    With ``strings=False`` only identifiers of the code count, not those of name-like
    strings: for evidence the analysis takes from a name it binds (a parameter), never from
    a subscript key or an attribute spelled as a string."""
    key = f"{test.__module__}:{test.__qualname__}{'' if strings else _CODE_ONLY}".encode()
    gates = tuple(sorted(words))
    if not gates or not all(_WORD.match(w) for w in gates):
        raise ValueError(f"names() gates are lowercase ASCII words, got {gates!r}")
    known = _NAME_TESTS.setdefault(bytes(key), (test, gates))
    if known != (test, gates):
        raise ValueError(f"names({key.decode()}) declared twice with different words")
    return Names(key)


def _name_test(trigger: bytes) -> tuple[Callable[[str], bool], tuple[str, ...]]:
    found = _NAME_TESTS.get(bytes(trigger))
    if found is None:  # named by a manifest: import the test's module, which declares it
        module = trigger.decode().partition(":")[0]
        importlib.import_module(module)
        found = _NAME_TESTS[bytes(trigger)]
    return found


_IDENTIFIERS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IDENTIFIERS_BYTES = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# Prose and values: comments, and string literals, whose identifiers a name test does not
# read. An f-string is code (its fields are expressions). A string is read as a name only
# where the analysis takes one from it: a subscript key (``ckpt['ema']``, ``self.shadow
# ['w']``) or the name given to ``getattr``/``get``/``pop`` (``getattr(args, 'ema')``,
# ``cfg.get('ema_decay')``), and only without whitespace. A value (``global_pool='avg'``,
# ``mode == 'avg'``, ``('avg', 'max')``) names no object. Strings are matched whole, so a
# ``#`` inside one is no comment.
_PROSE_SOURCE = (  # loops unrolled, and every branch starts with its one character
    r"#[^\r\n]*"
    r"|(?P<body>\"\"\"[^\"\\]*(?:(?:\\.|\"(?!\"\"))[^\"\\]*)*\"\"\""
    r"|\'\'\'[^\'\\]*(?:(?:\\.|\'(?!\'\'))[^\'\\]*)*\'\'\'"
    r"|\"[^\"\\\r\n]*(?:\\.[^\"\\\r\n]*)*\"|\'[^\'\\\r\n]*(?:\\.[^\'\\\r\n]*)*\')"
)
_PROSE = re.compile(_PROSE_SOURCE, re.DOTALL)
_PROSE_BYTES = re.compile(_PROSE_SOURCE.encode(), re.DOTALL)
_SPACE = re.compile(r"\s")
_SPACE_BYTES = re.compile(rb"\s")
_KEY_SOURCE = (
    r"(?:\[|\b(?:getattr|hasattr|setattr|delattr|get|pop|setdefault)\((?:[^(),\n]*,)?)"
    r"\s*[rRbBuU]{0,2}\Z"
)
_KEY = re.compile(_KEY_SOURCE)
_KEY_BYTES = re.compile(_KEY_SOURCE.encode())


def code_names(data: Any, strings: bool = True) -> set[Any]:
    """The identifiers of ``data`` outside its comments and strings, but for f-strings and
    (with ``strings``) the strings that stand as names (see ``_PROSE_SOURCE``).

    A name test asks whether the *code* names an average: "running average" in a docstring
    or a comment names nothing the analysis reads, and in a model library such prose is in
    most files that read weights."""
    text = isinstance(data, str)
    prose, space, names, key = (
        (_PROSE, _SPACE, _IDENTIFIERS, _KEY)
        if text
        else (_PROSE_BYTES, _SPACE_BYTES, _IDENTIFIERS_BYTES, _KEY_BYTES)
    )
    # The code between the prose, and the strings that count, joined: one scan for names.
    parts: list[Any] = []
    start = 0
    for match in prose.finditer(data):
        parts.append(data[start : match.start()])
        start = match.end()
        body = match.group("body")
        if body is None:  # a comment
            continue
        before = data[max(0, match.start() - 48) : match.start()]
        prefix = before[-2:]
        if ("f" in prefix.lower() if text else b"f" in prefix.lower()) or (
            strings and not space.search(body) and key.search(before) is not None
        ):
            parts.append(body)
    parts.append(data[start:])
    return set(names.findall((" " if text else b" ").join(parts)))


def without_prose(data: bytes) -> bytes:
    """``data`` with its comments and the strings that hold whitespace (docstrings,
    messages: "the average of the batch") blanked, for evidence that must be code."""
    parts: list[bytes] = []
    start = 0
    for match in _PROSE_BYTES.finditer(data):
        body = match.group("body")
        if body is not None and _SPACE_BYTES.search(body) is None:
            continue  # a name-like string stays
        parts.append(data[start : match.start()])
        start = match.end()
    parts.append(data[start:])
    return b" ".join(parts)


def _any_name(data: bytes, trigger: Names, seen: dict[Any, Any] | None = None) -> bool:
    """Whether an identifier of ``data``'s code passes the trigger's test.

    Only identifiers holding one of its words (in any case) can pass: the distinct
    identifiers are joined into one lower-cased text, the words are found there in one
    regular-expression pass, and only the identifiers around a hit are tested.

    The identifiers of the code are some of those of the whole text (prose and strings
    start and end at quotes, ``#`` and line ends, which no identifier spans), and telling
    the code from the prose is most of the cost: the test runs on the whole text's names
    first, and only when one of them passes are the code's own names read."""
    if seen is None:
        seen = {}
    settled = (_any_name, trigger.test, trigger.words)  # the same for both kinds of names
    anywhere = seen.get(settled)
    if anywhere is None:
        anywhere = seen[settled] = _passes(_joined_names(data, None, seen), trigger)
    if not anywhere:
        return False
    strings = not trigger.endswith(_CODE_ONLY.encode())
    return _passes(_joined_names(data, strings, seen), trigger)


def _joined_names(data: bytes, strings: bool | None, seen: dict[Any, Any]) -> str:
    """The distinct identifiers of ``data``, one a line: those of its code (``strings`` as
    for :func:`code_names`), or with ``strings`` None every identifier of the text. Several
    name tests read the same file: its names are scanned for once per kind."""
    key = (_any_name, strings)
    joined = seen.get(key)
    if joined is None:
        if strings is None:
            names: Iterable[bytes] = set(_IDENTIFIERS_BYTES.findall(data))
        else:
            names = code_names(data, strings)
        joined = seen[key] = b"\n".join(names).decode("ascii")
    return joined


def _passes(joined: str, trigger: Names) -> bool:
    """Whether one of the identifiers of ``joined`` (one a line) passes the trigger's test."""
    lower = joined.lower()
    test = trigger.test
    tested: set[int] = set()
    for hit in _words_expression(trigger.words).finditer(lower):
        start = lower.rfind("\n", 0, hit.start()) + 1
        if start in tested:
            continue
        tested.add(start)
        end = lower.find("\n", hit.end())
        if test(joined[start : end if end >= 0 else len(joined)]):
            return True
    return False


@cache
def _words_expression(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WORD = re.compile(r"[a-z]+\Z")


def identifier(name: str) -> Identifier:
    """Trigger on ``name`` as a whole identifier (an API imported under its own name)."""
    if not _IDENT.match(name):
        raise ValueError(f"not an identifier: {name!r}")
    return Identifier(name.encode("ascii"))


def component(word: str) -> Component:
    """Trigger on ``word`` as a component of any identifier, in lower, Title or UPPER case."""
    if not _WORD.match(word):
        raise ValueError(f"a component trigger is lowercase ASCII letters, got {word!r}")
    return Component(word.encode("ascii"))


# ``EMAModel`` -> EMA, Model; ``ModelEmaV2`` -> Model, Ema, V, 2; ``model_ema`` -> model, ema.
# An upper-case run is one component unless its last letter starts a capitalised word.
_COMPONENTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def identifier_components(name: str) -> list[str]:
    """The components of an identifier, lower-cased: the definition ``component`` matches."""
    return [part.lower() for part in _COMPONENTS.findall(name)]


def _component_expressions(word: str) -> list[tuple[str, str]]:
    """(literal, expression) pairs matching exactly the occurrences of ``word`` as a component.

    Only three casings can form a component (``eMA`` splits into ``e`` and ``MA``). Lower
    case must not touch other letters; Title case must not run on in lower case; an
    upper-case run must start with the word and end with it or with a capitalised word
    (``EMAModel``, not ``EMAIL`` or ``EMAs``). On an identifier this agrees exactly with
    :func:`identifier_components` (tests/perf/test_prefilter.py checks it).
    """
    title, upper = word.capitalize(), word.upper()
    return [
        (word, rf"{word}(?<![A-Za-z]{word})(?![a-z])"),
        (title, rf"{title}(?![a-z])"),
        (upper, rf"{upper}(?<![A-Z]{upper})(?:(?![A-Za-z])|(?=[A-Z][a-z]))"),
    ]


def _identifier_expression(name: str) -> tuple[str, str]:
    return (name, rf"{name}(?<![A-Za-z0-9_]{name})(?![A-Za-z0-9_])")


def _minimal(strings: Iterable[str]) -> list[str]:
    """Drop every string that contains another one (its scan is implied), shortest first."""
    kept: list[str] = []
    for s in sorted(set(strings), key=lambda s: (len(s), s)):
        if not any(k in s for k in kept):
            kept.append(s)
    return kept


class _Plan:
    """Gates and the checks attached to them, matched on a file's bytes.

    (Scanning a lower-cased copy instead, to fold the three casings of a component into
    one gate, was measured and lost: ``ema`` in any case is in a fifth of all files, in
    ``schema``, ``email`` and ``remain``, and those then need the exact checks.)
    """

    __slots__ = ("steps",)

    def __init__(
        self,
        triggers: list[str],
        expressions: list[tuple[str, str]],
        name_tests: Iterable[Names] = (),
    ):
        # A name test runs only where one of its words stands as an identifier component.
        tests = [
            (core, source, t)
            for t in name_tests
            for word in t.words
            for core, source in _component_expressions(word)
        ]
        gates = _minimal(
            [*triggers, *(core for core, _ in expressions), *(core for core, _, _ in tests)]
        )
        exact = set(triggers) & set(gates)
        # Triggers first (a hit settles it), then the shortest gates.
        gates.sort(key=lambda g: (g not in exact, len(g), g))
        attached: dict[
            str, tuple[list[str], list[str], list[tuple[str, Callable[[str], bool]]]]
        ] = {g: ([], [], []) for g in gates}
        for text in triggers:
            if text not in exact:
                attached[next(g for g in gates if g in text)][0].append(text)
        for core, expression in expressions:
            attached[next(g for g in gates if g in core)][1].append(expression)
        for core, source, trigger in tests:
            attached[next(g for g in gates if g in core)][2].append((source, trigger))

        def encode(text: str) -> bytes:
            # latin-1 maps code points 0-255 to the same bytes: triggers round-trip.
            return text.encode("latin-1")

        steps = []
        for gate in gates:
            if gate in exact:
                steps.append((encode(gate), None, (), ()))
                continue
            literals, sources, gated = attached[gate]
            # One search per expression: an alternation would lose the literal-prefix scan.
            searches = tuple(re.compile(encode(source)).search for source in sources)
            named = tuple((re.compile(encode(source)).search, name) for source, name in gated)
            steps.append((encode(gate), tuple(encode(t) for t in literals), searches, named))
        self.steps = tuple(steps)

    def matches(self, data: Any, seen: dict[Any, bool] | None = None) -> bool:
        """Whether ``data`` holds a trigger. ``seen`` remembers, for this data, which gates
        are present and which name tests passed, across the plans of one filter: the same
        gate (``EMA``) serves several sets, and a scan of a file is the cost to save."""
        if seen is None:
            seen = {}
        for gate, literals, searches, gated in self.steps:
            present = seen.get(gate)
            if present is None:
                present = seen[gate] = gate in data
            if present:
                if literals is None:
                    return True
                for text in literals:
                    if text in data:
                        return True
                for search in searches:
                    if search(data) is not None:
                        return True
                for word, trigger in gated:
                    # A test runs once per file, whichever of its words is found first.
                    found = seen.get(trigger)
                    if found is None:
                        if word(data) is None:
                            continue
                        found = seen[trigger] = _any_name(data, trigger, seen)
                    if found:
                        return True
        return False


class PreFilter:
    """Union of the triggers of a set of rules; ``matches(data)`` says whether to parse."""

    def __init__(self, rules: Iterable[type[Rule]]) -> None:
        literals: set[str] = set()
        patterns: set[bytes] = set()
        name_tests: set[Names] = set()
        groups: list[tuple[tuple[bytes, ...], ...]] = []
        self.accepts_all = False
        for rule in rules:
            if getattr(rule, "internal", False):
                continue
            rule_groups = getattr(rule, "trigger_groups", ())
            if not rule.triggers and not rule_groups:
                # A rule that cannot name its triggers must see every file.
                self.accepts_all = True
            for group in rule_groups:
                key = tuple(tuple(alternatives) for alternatives in group)
                if key not in groups:
                    groups.append(key)
            for trigger in rule.triggers:
                if not isinstance(trigger, bytes):
                    raise TypeError(
                        f"{rule.__name__}.triggers holds {trigger!r}: a trigger is bytes, "
                        "identifier(...) or component(...)"
                    )
                if not trigger:
                    self.accepts_all = True  # the empty string is in every file
                elif type(trigger) is bytes:
                    literals.add(trigger.decode("latin-1"))
                elif isinstance(trigger, Names):
                    name_tests.add(trigger)
                else:
                    patterns.add(trigger)
        kept = _minimal(literals)
        self.literals: tuple[bytes, ...] = tuple(t.encode("latin-1") for t in kept)
        self.patterns: tuple[bytes, ...] = tuple(sorted(patterns, key=lambda p: (repr(p), p)))
        expressions: list[tuple[str, str]] = []
        for pattern in self.patterns:
            if isinstance(pattern, Component):
                expressions.extend(_component_expressions(pattern.decode()))
            else:
                expressions.append(_identifier_expression(pattern.decode()))
        self.name_tests: tuple[Names, ...] = tuple(sorted(name_tests))
        self._kept, self._expressions = kept, expressions
        # A group with a set whose every trigger contains a literal trigger of the union only
        # admits files the union admits already: dropped.
        self.groups: tuple[tuple[tuple[bytes, ...], ...], ...] = tuple(
            group
            for group in groups
            if not any(
                all(
                    not isinstance(t, Names) and any(k in t for k in self.literals)
                    for t in alternatives
                )
                for alternatives in group
            )
        )

    # The matching plans compile a few hundred expressions: built on the first file to test,
    # so a run that settles every file from its cache (which needs the fingerprint only)
    # never pays for them.
    @cached_property
    def _bytes(self) -> _Plan:
        return _Plan(self._kept, self._expressions, self.name_tests)

    @cached_property
    def _groups(self) -> tuple[tuple[_TokenSet, ...], ...]:
        # Each set of a group is itself a small union of triggers. A set shared by several
        # groups (an evidence set, a rule's own tokens) is one object, tested at most once
        # per file.
        # A group is a conjunction, so its sets may be tested in any order: those needing a
        # name test (which reads every identifier of the file's code, the costliest check)
        # come after the literal ones, which then rule most files out for a substring test.
        sets: dict[tuple[bytes, ...], _TokenSet] = {}
        return tuple(
            tuple(
                sets.setdefault(alternatives, _TokenSet(alternatives))
                for alternatives in sorted(group, key=_names_last)
            )
            for group in self.groups
        )

    @cached_property
    def _scanner(self) -> tuple[Any, tuple[bytes, ...]] | None:
        """One automaton over every gate of the plans, or None."""
        try:
            import ahocorasick_rs
        except ImportError:  # optional speed-up: the plans then scan gate by gate
            return None
        plans = [self._bytes, *(p._bytes for g in self._groups for p in g)]
        gates = tuple(dict.fromkeys(step[0] for plan in plans for step in plan.steps))
        if not gates:
            return None
        return ahocorasick_rs.BytesAhoCorasick(gates).find_matches_as_indexes, gates

    def _present(self, data: bytes) -> dict[Any, bool]:
        """Which gates ``data`` holds, from one pass of the automaton (empty without one:
        the plans then test each gate themselves)."""
        scanner = self._scanner if type(data) is bytes else None
        if scanner is None:
            return {}
        find, gates = scanner
        seen = dict.fromkeys(gates, False)
        for which, _, _ in find(data, overlapping=True):
            seen[gates[which]] = True
        return seen

    def prepare(self) -> PreFilter:
        """Build the matching plans now (before forking workers that would each build them)."""
        _ = self._bytes, self._groups, self._scanner
        return self

    @property
    def gates(self) -> tuple[bytes, ...]:
        """The literals scanned first (every trigger of the union contains one)."""
        return tuple(step[0] for step in self._bytes.steps)

    @cached_property
    def fingerprint(self) -> str:
        """Names this filter's verdicts (the cache remembers which files it skipped)."""
        if self.accepts_all:
            return "all"
        text = "\0".join(repr(t) for t in sorted(self.tokens, key=repr))
        text += "\1" + repr(self.groups)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def tokens(self) -> tuple[bytes, ...]:
        """Every trigger of the union (literals first), for display and tests."""
        return (*self.literals, *self.patterns, *self.name_tests)

    def matches(self, data: bytes | str) -> bool:
        """True if the file may hold a finding and must be parsed."""
        if self.accepts_all:
            return True
        if isinstance(data, str):
            # Text is matched through its UTF-8 bytes: one plan and one automaton, and the
            # byte scan is the faster (every trigger is ASCII or spelled in UTF-8 in a file).
            data = data.encode("utf-8", "surrogatepass")
        seen = self._present(data)
        if self._bytes.matches(data, seen):
            return True
        known: dict[int, bool] = {}
        for group in self._groups:
            for part in group:
                found = known.get(id(part))
                if found is None:
                    found = known[id(part)] = part.matches(data, seen)
                if not found:
                    break
            else:
                return True
        return False


def _names_last(alternatives: tuple[bytes, ...]) -> bool:
    """Sort key of a group's sets: those holding a name test last (stable otherwise)."""
    return any(isinstance(t, Names) for t in alternatives)


_SHARED: dict[tuple[Any, ...], PreFilter] = {}


def for_rules(rules: tuple[Any, ...]) -> PreFilter:
    """The filter of these rules (classes or manifest entries), one per process: the
    command's parent, its workers, the engine and the flake8 plugin then share it, and a
    filter prepared before the workers fork is never compiled again in each of them."""
    found = _SHARED.get(rules)
    if found is None:
        found = _SHARED[rules] = PreFilter(rules)
    return found


class _TokenSet:
    """One set of a trigger group: matches when the data holds any of its triggers."""

    __slots__ = ("_bytes",)

    def __init__(self, triggers: Iterable[bytes]) -> None:
        literals: list[str] = []
        expressions: list[tuple[str, str]] = []
        name_tests: list[Names] = []
        for trigger in triggers:
            if isinstance(trigger, Names):
                name_tests.append(trigger)
            elif isinstance(trigger, Component):
                expressions.extend(_component_expressions(trigger.decode()))
            elif isinstance(trigger, Identifier):
                expressions.append(_identifier_expression(trigger.decode()))
            else:
                literals.append(trigger.decode("latin-1"))
        kept = _minimal(literals)
        self._bytes = _Plan(kept, expressions, name_tests)

    def matches(self, data: bytes | str, seen: dict[Any, bool] | None = None) -> bool:
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        return self._bytes.matches(data, {} if seen is None else seen)
