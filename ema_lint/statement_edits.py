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
        title,
        Edit.remove(moved, moved=True),
        Edit.insert_after(target, [without_blank_lines(moved)]),
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


def without_argument(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` without ``arg``, keeping the layout of the others: the argument before it
    takes over its comma when it was the last one (trailing comma and line breaks stay), and
    a comment at the end of its line moves to the end of the previous argument's line."""
    args = list(call.args)
    position = next(i for i, a in enumerate(args) if a is arg)
    del args[position]
    if position > 0:
        previous = args[position - 1]
        if position == len(args):
            args[position - 1] = previous.with_changes(comma=arg.comma)
        else:
            comment = _comma_comment(arg.comma)
            if comment is not None and _comma_comment(previous.comma) is None:
                args[position - 1] = previous.with_changes(
                    comma=_with_comment(previous.comma, comment)
                )
    return call.with_changes(args=args)


def _comma_comment(comma: cst.Comma | cst.MaybeSentinel) -> cst.Comment | None:
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.whitespace_after.first_line.comment
    return None


def _with_comment(
    comma: cst.Comma | cst.MaybeSentinel, comment: cst.Comment
) -> cst.Comma | cst.MaybeSentinel:
    if isinstance(comma, cst.Comma) and isinstance(
        comma.whitespace_after, cst.ParenthesizedWhitespace
    ):
        first = comma.whitespace_after.first_line.with_changes(
            whitespace=cst.SimpleWhitespace("  "), comment=comment
        )
        return comma.with_changes(
            whitespace_after=comma.whitespace_after.with_changes(first_line=first)
        )
    return comma
