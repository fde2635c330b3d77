"""What a rule reports: findings, their positions and the fixes that repair them.

Fixes are expressed as libcst node edits (the same objects the rules visited), so a rule
never does text surgery; the fixer turns them into a new module in one transform.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # findings are read from the cache and printed without loading libcst
    import libcst as cst


class Applicability(str, enum.Enum):
    """How sure a fix is to do only what its rule's documentation says.

    ``SAFE`` fixes are applied by ``--fix``; ``UNSAFE`` ones (judgment calls such as choosing
    a new decay) only with ``--unsafe-fixes``.
    """

    SAFE = "safe"
    UNSAFE = "unsafe"

    def __str__(self) -> str:
        return self.value


class FixAvailability(str, enum.Enum):
    """What a rule promises about fixes, shown by ``ema-lint rules`` and in the docs."""

    NONE = "none"
    SOMETIMES = "sometimes"
    ALWAYS = "always"

    def __str__(self) -> str:
        return self.value


class FixScope(str, enum.Enum):
    """Which lines a rule's fixes may change; the property tests hold every fix to it.

    ``STATEMENT``: only the statement that holds the finding. ``VALUE``: that statement and
    the statements where the values it flags are written (a fix that edits a constant where
    it is defined); its edits only replace expressions. ``MOVES``: that statement, the
    statements its edits remove, replace or insert next to, and the module's import block
    (for fixes that move or insert code).
    """

    STATEMENT = "statement"
    VALUE = "value"
    MOVES = "moves"

    def __str__(self) -> str:
        return self.value


class EditKind(str, enum.Enum):
    REPLACE = "replace"  # node -> new node (or a RemovalSentinel / FlattenSentinel)
    INSERT_BEFORE = "insert_before"  # statement -> new statements + statement
    INSERT_AFTER = "insert_after"  # statement -> statement + new statements
    REMOVE = "remove"  # statement removed
    ADD_IMPORT = "add_import"  # module-level import, added once if missing


if TYPE_CHECKING:
    Replacement = Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]  # noqa: UP007


@dataclass(frozen=True, eq=False)
class Edit:
    """One change to the tree, anchored on a node of the module that was linted."""

    kind: EditKind
    target: cst.CSTNode | None
    replacement: Replacement | None = None
    statements: tuple[cst.BaseStatement, ...] = ()
    module: str = ""  # for ADD_IMPORT: "torch.optim.swa_utils"
    name: str | None = None  # for ADD_IMPORT: "update_bn" (``from module import name``)
    moved: bool = False  # for REMOVE: the statement lives on elsewhere, with its comments

    @classmethod
    def replace(cls, old: cst.CSTNode, new: Replacement) -> Edit:
        return cls(EditKind.REPLACE, old, replacement=new)

    @classmethod
    def remove(cls, statement: cst.CSTNode, *, moved: bool = False) -> Edit:
        """Delete ``statement``. The comments above it stay, on the next statement, unless
        it is ``moved``: then the fix puts it (and its comments) somewhere else."""
        return cls(EditKind.REMOVE, statement, moved=moved)

    @classmethod
    def insert_before(cls, statement: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> Edit:
        return cls(EditKind.INSERT_BEFORE, statement, statements=tuple(new))

    @classmethod
    def insert_after(cls, statement: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> Edit:
        return cls(EditKind.INSERT_AFTER, statement, statements=tuple(new))

    @classmethod
    def add_import(cls, module: str, name: str | None = None) -> Edit:
        """``import module`` (name None) or ``from module import name``."""
        return cls(EditKind.ADD_IMPORT, None, module=module, name=name)


@dataclass(frozen=True, eq=False)
class Fix:
    """A set of edits that together repair one finding."""

    applicability: Applicability
    edits: tuple[Edit, ...]
    title: str

    @classmethod
    def safe(cls, title: str, *edits: Edit) -> Fix:
        return cls(Applicability.SAFE, tuple(edits), title)

    @classmethod
    def unsafe(cls, title: str, *edits: Edit) -> Fix:
        return cls(Applicability.UNSAFE, tuple(edits), title)


@dataclass(frozen=True, order=True)
class Position:
    """1-based line, 1-based column (characters), as editors and ruff print them."""

    line: int
    column: int


@dataclass(frozen=True, eq=False)
class TextEdit:
    """A fix rendered as text, for machine-readable output."""

    start: Position
    end: Position
    content: str


@dataclass(frozen=True)
class Related:
    """Another file's line the finding rests on (the class or the caller it was told of)."""

    path: str
    line: int
    message: str


@dataclass(eq=False)
class Diagnostic:
    """One finding in one file."""

    code: str
    name: str
    message: str
    path: str
    start: Position
    end: Position
    fix: Fix | None = None
    cell: int | None = None  # notebook cell (1-based) when the source is a notebook
    # Filled by the engine for output formats that show fixes as text.
    text_edits: tuple[TextEdit, ...] | None = field(default=None, repr=False)
    # First line of the statement holding the finding: where a suppression comment may also sit.
    statement_line: int | None = field(default=None, repr=False)
    # Other files' locations the finding's evidence came from (SARIF relatedLocations).
    related: tuple[Related, ...] = field(default=(), repr=False)

    @property
    def line(self) -> int:
        return self.start.line

    @property
    def column(self) -> int:
        return self.start.column

    @property
    def fixable(self) -> bool:
        return self.fix is not None

    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.start.line, self.start.column, self.code)
