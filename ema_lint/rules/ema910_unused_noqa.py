"""EMA910: a ``# noqa`` for an EMA code that silences nothing."""

from __future__ import annotations

import re
from typing import ClassVar

import libcst as cst

from ..diagnostics import Applicability, Edit, Fix, FixAvailability
from ..noqa import directive_tokens
from ..rule import Rule

_SPELLINGS = ("noqa", "NOQA", "NoQA", "Noqa")


_Found = tuple[cst.Comment, cst.CSTNode, "cst.CSTNode | None"]


def _comments(module: cst.Module) -> list[_Found]:
    """Each comment that may hold a noqa directive, with the node holding it and the
    statement it sits in (the shared index skips comments: this rule, off by default,
    pays for its own walk of the tree, whitespace included)."""
    found: list[_Found] = []
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(module, None)]
    while stack:
        node, statement = stack.pop()
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            statement = node
        for child in node.children:
            if isinstance(child, cst.Comment):
                # Only the spellings of the triggers: the pre-filter stays sound.
                if any(spelling in child.value for spelling in _SPELLINGS):
                    found.append((child, node, statement))
            else:
                stack.append((child, statement))
    return found


def _without(comment: str, token: str) -> str:
    """The comment text with ``token`` dropped from its noqa list ("" if nothing is left)."""
    match = directive_tokens(comment)
    assert match is not None
    start, end, tokens = match
    kept = [t for t in tokens if t.upper() != token.upper()]
    before, after = comment[:start], comment[end:]
    if kept:
        return before + ", ".join(kept) + after
    # The whole directive goes; text before it (a comment of its own) stays.
    head = re.sub(r"#\s*(?:ema-lint\s*:\s*)?noqa\s*:\s*$", "", before, flags=re.IGNORECASE)
    rest = (head.rstrip() + " " + after.strip()).strip()
    return rest


class UnusedNoqa(Rule):
    """
    ## What it finds
    A suppression comment for an EMA code or rule name (`# noqa: EMA101`,
    `# ema-lint: noqa: ema-decay-out-of-range`, a prefix such as `EMA1`) that silences no
    finding on its line: the code was fixed, moved or never there. Only codes of rules that
    run on the file are judged (a comment for a rule your configuration turns off is left
    alone), and codes of other tools in the same comment (`F401`) are never touched.

    Off by default: select it (`--extend-select EMA910`) after adopting ema-lint with
    `--add-noqa`, to clean up as the findings get fixed.

    ## Why it hurts training
    A stale `# noqa: EMA101` hides the next real EMA101 on that line: someone changes the
    decay again, the averaged model stops averaging, and nothing is reported.

    ## Example
    ```python
    from timm.utils import ModelEmaV2

    ema = ModelEmaV2(model, decay=0.9998)  # noqa: EMA101
    ```

    ## Use instead
    ```python
    from timm.utils import ModelEmaV2

    ema = ModelEmaV2(model, decay=0.9998)
    ```

    ## Fix
    Safe: removes the unused code from the comment, and the comment itself when nothing else
    is left in it (other text and other tools' codes stay). A comment on a line of its own
    is reported without a fix.
    """

    code = "EMA910"
    name = "unused-noqa"
    summary = "A noqa comment for an EMA code that suppresses nothing"
    default_enabled = False
    fix_availability = FixAvailability.SOMETIMES
    fix_applicability = Applicability.SAFE
    triggers = tuple(spelling.encode() for spelling in _SPELLINGS)
    judges_suppressions: ClassVar[bool] = True  # the engine decides which reports stand

    def finish(self) -> None:
        # Comments come back in reverse document order from the walk: report in order.
        found = _comments(self.ctx.module)
        found.reverse()
        for comment, holder, statement in found:
            match = directive_tokens(comment.value)
            if match is None:
                continue
            for token in match[2]:
                self._judge(comment, holder, statement, token)

    def _judge(
        self,
        comment: cst.Comment,
        holder: cst.CSTNode,
        statement: cst.CSTNode | None,
        token: str,
    ) -> None:
        fix = None
        # A comment on a line of its own belongs to no statement's line: no fix there.
        if statement is not None and not isinstance(holder, cst.EmptyLine):
            new_text = _without(comment.value, token)
            if new_text:
                new = statement.deep_replace(comment, comment.with_changes(value=new_text))
                title = f"Remove {token} from the noqa comment"
            else:
                bare = holder.with_changes(whitespace=cst.SimpleWhitespace(""), comment=None)
                new = statement.deep_replace(holder, bare)
                title = "Remove the unused noqa comment"
            fix = Fix.safe(title, Edit.replace(statement, new))
        # The engine keeps the report only if ``token`` silenced nothing on this line.
        self.report_unused_suppression(
            comment, token, f"Unused noqa for {token}: nothing on this line is reported", fix
        )
