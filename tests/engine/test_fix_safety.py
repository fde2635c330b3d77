"""What a fix must never do to the rest of the file, with rules made for the test."""

from __future__ import annotations

import libcst as cst
import pytest

from ema_lint import engine
from ema_lint.diagnostics import Edit, Fix
from ema_lint.rule import Rule


class RemovesDrop(Rule):
    """Removes every ``drop()`` statement (as EMA105 removes a cast statement)."""

    code = "EMA995"
    name = "test-removes-drop"
    summary = "removes drop() statements"
    triggers = (b"drop",)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        [small] = node.body if len(node.body) == 1 else (None,)
        if (
            isinstance(small, cst.Expr)
            and isinstance(small.value, cst.Call)
            and isinstance(small.value.func, cst.Name)
            and small.value.func.value == "drop"
        ):
            self.report(node, "drop", Fix.safe("remove", Edit.remove(node)))


class BumpsLiteral(Rule):
    """Rewrites the literal 0.99 as 0.999 (as EMA101's fix does)."""

    code = "EMA996"
    name = "test-bumps-literal"
    summary = "0.99 -> 0.999"
    triggers = (b"0.99",)

    def visit_Float(self, node: cst.Float) -> None:
        if node.value == "0.99":
            self.report(node, "bump", Fix.safe("bump", Edit.replace(node, cst.Float("0.999"))))


def _fix(source: str, rule: type[Rule]) -> str:
    outcome = engine.fix(source, "t.py", engine.FileSettings(rules=(rule,)))
    assert not [d for d in outcome.diagnostics if d.code == "EMA903"]
    assert isinstance(outcome.fixed, str)
    return outcome.fixed


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "def f():\n    x = 1\n    # keep the copy on the GPU\n    drop()\n    x.cuda()\n",
            "def f():\n    x = 1\n    # keep the copy on the GPU\n    x.cuda()\n",
        ),
        (
            "def f():\n    x = 1\n\n    # the last statement\n    drop()\n\n\ny = 2\n",
            "def f():\n    x = 1\n\n    # the last statement\n\n\ny = 2\n",
        ),
        (
            "if a:\n    # only statement\n    drop()\nz = 3\n",
            "if a:\n    pass\n    # only statement\nz = 3\n",
        ),
        (
            "# one\ndrop()\n# two\ndrop()\nw = 4\n",
            "# one\n# two\nw = 4\n",
        ),
        ("x = 1\ndrop()  # a comment on the removed line goes with it\n", "x = 1\n"),
    ],
    ids=["before-next", "end-of-block", "only-statement", "consecutive", "same-line"],
)
def test_removing_a_statement_keeps_the_comments_above_it(source: str, expected: str) -> None:
    fixed = _fix(source, RemovesDrop)
    assert fixed == expected
    cst.parse_module(fixed)


@pytest.mark.parametrize(
    "source",
    [
        "a = 1\r\nb = 0.99\r\nc = 3\r",  # a lone CR ends the file
        "a = 1\rb = 0.99\r",
        "\x0cimport os\n\ndef f():\n    return 0.99\n\x0c\ny = 2\n",  # form feeds
        "x = 0.99\n   \x0cy = 2\r\n",
    ],
    ids=["crlf-then-cr", "cr-only", "form-feeds", "form-feed-and-final-crlf"],
)
def test_lines_libcst_does_not_reproduce_are_kept(source: str) -> None:
    """libcst drops a lone CR ending the file and a form feed before a statement."""
    assert _fix(source, BumpsLiteral) == source.replace("0.99", "0.999")


def test_positions_and_text_edits_are_those_of_the_original_text() -> None:
    """libcst drops the form feed; columns and JSON/SARIF edits must not shift with it."""
    source = "a = 1\n\x0cb = 0.99\n"
    settings = engine.FileSettings(rules=(BumpsLiteral,))
    analysis = engine.analyze(source, "t.py", settings)
    [diagnostic] = analysis.diagnostics
    assert (diagnostic.line, diagnostic.column) == (2, 6)  # the form feed is column 1
    engine.attach_text_edits(analysis)
    [edit] = diagnostic.text_edits or ()
    lines = source.split("\n")
    line = lines[edit.start.line - 1]
    lines[edit.start.line - 1] = (
        line[: edit.start.column - 1] + edit.content + line[edit.end.column - 1 :]
    )
    assert "\n".join(lines) == _fix(source, BumpsLiteral)
