"""Sources that ema-lint refuses to parse: too large, or nested deeper than the parser survives.

libcst's native parser recurses on the machine stack. About 1,300 nested parentheses, or an
expression chain of some thousands of operators (``a + a + ...``, ``not not ...``, adjacent
strings), overflow that stack and kill the whole process with a segmentation fault that no
``except`` can catch; its time also grows much faster than linearly with the length of one
such chain (2,000 ``+`` in one expression take seconds). Code generation and tree walks,
in Python, raise ``RecursionError`` from about 500 levels; the engine catches those.

So before parsing, one cheap scan of the text (strings and comments skipped, no tokenizer)
refuses what CPython refuses too (more than 200 nested brackets, 100 levels of
indentation) and what is estimated to nest deeper than ``MAX_NESTING``: the enclosing blocks
(an ``elif`` nests one level per branch), two levels per open bracket, and at each bracket
level the operators chained by precedence (``a*b + c*d`` nests two deep, ``a+b+c+d`` three).
The estimate sits within a factor of two of libcst's real depth; its limit is far above
real code (a few dozen levels; none of the 9,100 files of torch, sympy and their
dependencies comes near it but one that libcst cannot print back either), below the ~490
levels where code generation runs out of Python stack, and far below where libcst crashes
(so a refused file costs no parse, and a parsed one rarely fails later). Files over
``MAX_PARSE_BYTES`` are not parsed either: they are generated data, not training code, and
would take minutes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_PARSE_BYTES = 2_000_000
MAX_BRACKETS = 200  # CPython: "too many nested parentheses" beyond this
MAX_INDENT = 100  # CPython: "too many levels of indentation" from this many
MAX_NESTING = 400  # estimated tree depth; libcst crashes somewhere above 3,000

# Characters that start a token the scan cares about; between them (names, numbers,
# keywords, spaces) is a "gap".
_START = r"""["'#()\[\]{},;\r\n\\\-+*/%@&|^~<>=!.:]"""
_OPERATOR = r"\*\*=?|//=?|>>=?|<<=?|->|:=|\.\.\.|[-+*/%@&|^<>=!]=|[-+*/%@&|^~<>=!.:]"
_KEYWORDS = r"\b(?:lambda|if|else|for|or|and|not|in|is|await)\b"
_BODIES = {  # unrolled loops: fast on long strings
    "'": r"[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'",
    '"': r'[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"',
    "'''": r"[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*'''",
    '"""': r'[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""',
}
_KINDS = (
    ("'\"", "str"),
    ("#", "comment"),
    ("([{", "open"),
    (")]}", "close"),
    (",;", "sep"),
    ("\r\n", "newline"),
    ("\\", "continuation"),
    ("-+*/%@&|^~<>=!.:", "op"),
)

# Precedence classes, loosest first. An operator adds one level to the chain of its class
# and ends the chains of the classes that bind tighter.
_LAMBDA, _IF, _OR, _AND, _NOT, _COMPARE = 1, 2, 3, 4, 5, 6
_BITOR, _XOR, _BITAND, _SHIFT, _ARITH, _TERM, _UNARY, _POWER, _AWAIT, _PRIMARY, _CONCAT = range(
    7, 18
)
# (class, levels added); comparisons chain flat: ``a < b < c`` is one node.
_OPERATORS: dict[str, tuple[int, int]] = {
    "|": (_BITOR, 1),
    "^": (_XOR, 1),
    "&": (_BITAND, 1),
    "<<": (_SHIFT, 1),
    ">>": (_SHIFT, 1),
    "+": (_ARITH, 1),
    "-": (_ARITH, 1),
    "*": (_TERM, 1),
    "/": (_TERM, 1),
    "//": (_TERM, 1),
    "%": (_TERM, 1),
    "@": (_TERM, 1),
    "~": (_UNARY, 1),
    "**": (_POWER, 1),
    ".": (_PRIMARY, 1),
    "...": (_PRIMARY, 0),
    "!": (_COMPARE, 0),
    ":": (_LAMBDA, 0),
    **{op: (_COMPARE, 0) for op in ("<", ">", "==", "!=", "<=", ">=")},
}
_KEYWORD_CLASSES: dict[str, tuple[int, int]] = {
    "lambda": (_LAMBDA, 1),
    "if": (_IF, 1),
    "else": (_IF, 0),
    "for": (_IF, 0),
    "or": (_OR, 1),
    "and": (_AND, 1),
    "not": (_NOT, 1),
    "in": (_COMPARE, 0),
    "is": (_COMPARE, 0),
    "await": (_AWAIT, 1),
}
# Operators after which a new expression starts.
_SEPARATORS = frozenset(("=", ":=", "->")) | frozenset(
    op + "=" for op in ("+", "-", "*", "/", "//", "%", "@", "&", "|", "^", "<<", ">>", "**")
)


class _Patterns:
    """The scan's regular expressions and tables, for ``str`` or for ``bytes`` sources."""

    def __init__(self, kind: type) -> None:
        def key(text: str) -> str | bytes:
            return text.encode() if kind is bytes else text

        def compile_(text: str, flags: int = 0) -> re.Pattern:
            return re.compile(key(text), flags)

        self.start = compile_(_START)
        self.operator = compile_(_OPERATOR)
        self.keywords = compile_(_KEYWORDS)
        self.bodies = {key(q): compile_(body, re.DOTALL) for q, body in _BODIES.items()}
        self.triple = {key("'''"), key('"""')}
        self.indent = compile_(r"[ \t\f]*")
        self.brackets = compile_(r"[(\[{)\]}]")
        self.newline = compile_(r"\r\n|\r|\n")
        self.word = compile_(r"\w")
        self.elif_ = compile_(r"elif\b")
        self.else_ = compile_(r"else\b")
        self.prefix_chars = key("rRbBfFuUtT")
        self.fstring_chars = key("fFtT")
        self.operators = {key(op): value for op, value in _OPERATORS.items()}
        self.keyword_classes = {key(kw): value for kw, value in _KEYWORD_CLASSES.items()}
        self.separators = {key(op) for op in _SEPARATORS}
        self.kinds = {key(c): kind_ for chars, kind_ in _KINDS for c in chars}
        self.opening = {key(c) for c in "([{"}
        self.line_ends = {key(c) for c in "\r\n#\\"}


_STR = _Patterns(str)
_BYTES = _Patterns(bytes)


@dataclass(frozen=True)
class Refusal:
    """Why a source is not parsed, and where (1-based line and column)."""

    message: str
    line: int = 1
    column: int = 1


def check(data: bytes | str) -> Refusal | None:
    """A reason not to parse ``data``, or None when it is safe to parse."""
    size = len(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    if size > MAX_PARSE_BYTES:
        return Refusal(
            f"the file is {size / 1e6:.1f} MB; ema-lint parses files up to "
            f"{MAX_PARSE_BYTES / 1e6:.0f} MB (generated code is not checked)"
        )
    found = _scan(data)
    if found is None:
        return None
    message, offset = found
    line, column = position(data, offset)
    return Refusal(message, line, column)


def position(data: bytes | str, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of an offset of ``data``."""
    patterns = _STR if isinstance(data, str) else _BYTES
    line = 1
    start = 0
    for match in patterns.newline.finditer(data, 0, offset):
        line += 1
        start = match.end()
    prefix = data[start:offset]
    if isinstance(prefix, bytes):
        prefix = prefix.decode("utf-8", "replace")
    return line, len(prefix) + 1


def _too_deep() -> str:
    return f"expressions or blocks nested too deeply (over {MAX_NESTING} levels) to parse safely"


class _Level:
    """The operator chains of one bracket level: [class, length] pairs, tighter last."""

    __slots__ = ("chains", "total")

    def __init__(self) -> None:
        self.chains: list[list[int]] = []
        self.total = 0

    def add(self, cls: int, levels: int) -> int:
        """Chain an operator of ``cls``; returns the change of this level's depth."""
        chains = self.chains
        before = self.total
        while chains and chains[-1][0] > cls:
            self.total -= chains.pop()[1]
        if levels:
            if chains and chains[-1][0] == cls:
                chains[-1][1] += levels
            else:
                chains.append([cls, levels])
            self.total += levels
        return self.total - before

    def reset(self) -> int:
        before = self.total
        self.chains.clear()
        self.total = 0
        return -before


def _scan(data: bytes | str) -> tuple[str, int] | None:
    """(message, offset) of the first place nested beyond the limits, or None.

    One loop with local state, because it runs over every file that is parsed.
    """
    p = _STR if isinstance(data, str) else _BYTES
    search = p.start.search
    match_operator = p.operator.match
    kinds, operators, separators = p.kinds, p.operators, p.separators
    keyword_classes = p.keyword_classes
    length = len(data)
    # Keywords are found in one pass; those inside strings and comments are skipped below.
    keywords = [(m.start(), m.end(), m.group()) for m in p.keywords.finditer(data)]
    keywords.append((length + 1, length + 1, ""))
    k = 0
    levels = [_Level()]
    level = levels[0]
    depth = 0  # blocks + 2 per open bracket + every level's chains
    operand = False  # the previous token ends an operand
    string = False  # ... and it is a string (adjacent strings nest)
    indents = [0]  # widths of the enclosing blocks
    elifs = [0]  # elif branches chained at each enclosing block
    pos = 0
    while True:
        match = search(data, pos)
        start = length if match is None else match.start()
        if start > pos:
            # A gap: names, numbers, keywords. Keywords chain by precedence too.
            while keywords[k][0] < pos:
                k += 1
            position = pos
            while keywords[k][0] < start:
                word_start, position, word = keywords[k]
                k += 1
                cls, added = keyword_classes[word]
                depth += level.add(cls, added)
                operand = string = False
                if depth > MAX_NESTING:
                    return _too_deep(), word_start
            if position < start and not data[position:start].isspace():
                operand, string = True, False
        if match is None:
            return None
        char = match.group()
        kind = kinds[char]
        pos = match.end()
        if kind == "op":
            operator_match = match_operator(data, start)
            assert operator_match is not None
            pos = operator_match.end()
            operator = operator_match.group()
            if operator in separators:
                depth += level.reset()
            else:
                cls, added = operators[operator]
                if not operand and cls in _BINARY_ONLY:
                    # -x and +x are unary; *args, **kwargs, .5 and decorators chain nothing.
                    cls, added = (_UNARY, 1) if cls == _ARITH else (_UNARY, 0)
                depth += level.add(cls, added)
            operand = string = False
        elif kind == "open":
            if operand:
                depth += level.add(_PRIMARY, 1)  # a call or a subscript
            level = _Level()
            levels.append(level)
            depth += 2
            operand = string = False
            if len(levels) - 1 > MAX_BRACKETS:
                return "too many nested parentheses", start
        elif kind == "close":
            if len(levels) > 1:
                depth -= levels.pop().total + 2
                level = levels[-1]
            operand, string = True, False
        elif kind == "sep":
            depth += level.reset()
            operand = string = False
        elif kind == "str":
            quote = data[start : start + 3]
            if quote not in p.triple:
                quote = char
            body = p.bodies[quote].match(data, start + len(quote))
            pos = length if body is None else body.end()
            if string:
                depth += level.add(_CONCAT, 1)  # adjacent strings nest
            if _is_fstring(data, start, p):
                inner = _max_bracket_depth(data, start, pos, p)
                if len(levels) - 1 + inner > MAX_BRACKETS:
                    return "too many nested parentheses", start
                if depth + 2 * inner > MAX_NESTING:
                    return _too_deep(), start
            operand = string = True
        elif kind == "comment":
            newline = p.newline.search(data, pos)
            pos = length if newline is None else newline.start()
        elif kind == "continuation":
            newline = p.newline.match(data, pos)
            if newline is not None:
                pos = newline.end()
        elif kind == "newline" and len(levels) == 1:
            # A new logical line: track the blocks it is in.
            if char == "\r" or char == b"\r":
                newline = p.newline.match(data, start)
                assert newline is not None
                pos = newline.end()
            level.reset()
            operand = string = False
            indent = p.indent.match(data, pos)
            assert indent is not None
            code = indent.end()
            following = data[code : code + 1]
            if following and following not in p.line_ends:
                width = _width(indent.group())
                while width < indents[-1]:
                    indents.pop()
                    elifs.pop()
                if width > indents[-1]:
                    indents.append(width)
                    elifs.append(0)
                    if len(indents) - 1 >= MAX_INDENT:
                        return "too many levels of indentation", code
                if p.elif_.match(data, code):
                    elifs[-1] += 1
                elif not p.else_.match(data, code):
                    elifs[-1] = 0
            depth = 3 * (len(indents) - 1) + sum(elifs)
        if depth > MAX_NESTING:
            return _too_deep(), start


_BINARY_ONLY = frozenset((_ARITH, _TERM, _POWER, _PRIMARY))


def _width(indent: bytes | str) -> int:
    """Indentation width as CPython computes it (tabs to multiples of 8, form feed resets)."""
    if not indent.strip(" " if isinstance(indent, str) else b" "):
        return len(indent)  # spaces only: the usual case
    width = 0
    for char in indent:
        if char in ("\t", 9):
            width = (width // 8 + 1) * 8
        elif char in ("\f", 12):
            width = 0
        else:
            width += 1
    return width


def _is_fstring(data: bytes | str, quote: int, p: _Patterns) -> bool:
    start = quote
    while start > 0 and quote - start < 3 and data[start - 1 : start] in p.prefix_chars:
        start -= 1
    if start == quote or (start > 0 and p.word.match(data, start - 1)):
        return False
    return any(data[i : i + 1] in p.fstring_chars for i in range(start, quote))


def _max_bracket_depth(data: bytes | str, start: int, end: int, p: _Patterns) -> int:
    depth = deepest = 0
    for match in p.brackets.finditer(data, start, end):
        if match.group() in p.opening:
            depth += 1
            deepest = max(deepest, depth)
        elif depth:
            depth -= 1
    return deepest
