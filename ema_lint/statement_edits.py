"""Statement-level edit recipes shared by the rules that move or wrap an update.

A move is one ``Fix`` with two edits on the linted module's nodes: remove the statement
where it is, insert it after its new neighbour. libcst re-indents a statement to the block
it lands in, and the statement carries its own comments (the lines above it and the one
at its end) along; only the blank lines above it are dropped, so that it does not open a
gap in the middle of the block it moves into.
"""

from __future__ import annotations

import libcst as cst

from .diagnostics import Edit, Fix


def without_blank_lines(statement: cst.BaseStatement) -> cst.BaseStatement:
    """``statement`` with the blank lines above it dropped and its comment lines kept."""
    kept = [line for line in statement.leading_lines if line.comment is not None]
    return statement.with_changes(leading_lines=kept)


def move_after(moved: cst.BaseStatement, target: cst.BaseStatement, title: str) -> Fix:
    """A safe fix that moves ``moved`` to directly after ``target``."""
    return Fix.safe(
        title, Edit.remove(moved), Edit.insert_after(target, [without_blank_lines(moved)])
    )


def wrap_in_if(statement: cst.BaseStatement, test: cst.BaseExpression) -> cst.If:
    """``if test:`` around ``statement`` in place; the comments above it go above the ``if``."""
    return cst.If(
        test=test,
        body=cst.IndentedBlock([statement.with_changes(leading_lines=[])]),
        leading_lines=statement.leading_lines,
    )


def call_statement(
    receiver: cst.BaseExpression, method: str, *args: cst.Arg
) -> cst.SimpleStatementLine:
    """``receiver.method(args)`` as a statement line."""
    call = cst.Call(cst.Attribute(receiver, cst.Name(method)), args=list(args))
    return cst.SimpleStatementLine([cst.Expr(call)])
