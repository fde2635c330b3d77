"""ema-lint's own errors. They are reported by the engine, not found by a visitor."""

from __future__ import annotations

from typing import ClassVar

from ..rule import Rule


class InternalRule(Rule):
    """Base of the EMA9xx codes: never instantiated as a visitor."""

    internal: ClassVar[bool] = True


class UnparseableFile(InternalRule):
    """
    ## What it finds
    A file that ema-lint could not read as Python: a syntax error, bytes that are not valid
    text in the file's declared encoding (a NUL byte: a binary file), or nesting deeper than
    the parser can follow (more than 200 nested brackets or 100 levels of indentation, as
    in CPython, or expressions chained hundreds of operators deep). Files over 2 MB are not
    parsed either: they are generated code or data, and would take minutes. A YAML config
    is not read when it is invalid YAML, its aliases refer to themselves or expand to more
    than 100,000 nodes (an alias bomb), or it is over 1 MB. A UTF-16 or UTF-32 file holding
    averaging code is reported too: Python reads source as UTF-8 unless a coding line says
    otherwise (PEP 263).

    ## Why it matters
    Nothing in the file was checked, so any averaging bug in it goes unseen. The message
    carries the parser's own words and the line it stopped at.

    ## Example
    ```python
    ema = ModelEmaV2(model, decay=0.999
    ```

    ## Use instead
    ```python
    ema = ModelEmaV2(model, decay=0.999)
    ```

    ## Fix
    None: fix the syntax error; the file is then checked on the next run. A generated file
    can be excluded (`extend-exclude`) or its EMA901 ignored (`per-file-ignores`).
    """

    code = "EMA901"
    name = "unparseable-file"
    summary = "The file could not be parsed, so it was not checked"


class RuleCrashed(InternalRule):
    """
    ## What it finds
    A rule that raised an exception on a file. The other rules' findings for the file are
    still reported; only the crashed rule's are missing.

    ## Why it matters
    It is a bug in ema-lint, never in your code. The message names the rule and the error;
    please report it with the file (or a reduced version of it). The run exits with code 2.

    ## Fix
    None. Ignore the rule for that file (`per-file-ignores`) until ema-lint is fixed.
    """

    code = "EMA902"
    name = "rule-crashed"
    summary = "A rule raised an error on this file (a bug in ema-lint)"


class InvalidFix(InternalRule):
    """
    ## What it finds
    A fix that would have left the file unparseable. ema-lint re-parses every fixed file
    before writing it; a fix whose result does not parse is dropped, the file keeps its
    original text for that finding, and this error names the rule whose fix failed. The same
    holds for a fix that cannot be applied without touching other lines: code nested too
    deeply for the fixer, or a file the parser does not reproduce line for line.

    ## Why it matters
    It is a bug in ema-lint's fix, never in your code; your file was not damaged. The run
    exits with code 2.

    ## Fix
    None. Apply the change by hand; please report the file.
    """

    code = "EMA903"
    name = "invalid-fix"
    summary = "A fix would have produced code that does not parse; it was not applied"
