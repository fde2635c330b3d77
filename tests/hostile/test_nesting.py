"""Code nested deeper than the parser survives: EMA901, never a traceback, never a crash.

libcst's native parser overflows the machine stack (a segmentation fault) on about 1,300
nested parentheses or on chains of some thousands of operators, so those inputs run in a
child process: if the guard in ``ema_lint.limits`` ever lets one through, this test fails
instead of killing pytest. Nesting between what the guard refuses and what Python's
recursion limit allows is caught where trees are generated or walked.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ema_lint import engine, limits, registry
from tests.fixture_cases import FIXTURES
from tests.samples import BAD

ROOT = Path(__file__).resolve().parents[2]
HEADER = "from timm.utils import ModelEmaV2\n"
FINDING = "ema = ModelEmaV2(model, decay=0.99)\n"

# Each far beyond libcst's crash point; each would kill the process if it reached the parser.
CRASHERS = {
    "parentheses": "x = " + "(" * 5000 + "1" + ")" * 5000,
    "lists": "x = " + "[" * 3000 + "1" + "]" * 3000,
    "calls": "x = " + "f(" * 3000 + "1" + ")" * 3000,
    "unary minus": "x = " + "-" * 20000 + "1",
    "not": "x = " + "not " * 20000 + "y",
    "and": "x = " + " and ".join(["y"] * 20000),
    "plus": "x = " + " + ".join(["y"] * 20000),
    "adjacent strings": "x = (\n" + "    'part'\n" * 20000 + ")",
    "lambda": "x = " + "lambda: " * 10000 + "1",
    "conditional": "x = " + "y if z else " * 10000 + "w",
    "attributes": "x = y" + ".z" * 20000,
    "elif": "if a:\n    pass\n" + "elif a:\n    pass\n" * 10000,
    "f-string brackets": "x = f'{" + "(" * 3000 + "1" + ")" * 3000 + "}'",
    "indentation": "".join(" " * i + "if a:\n" for i in range(150)) + " " * 150 + "pass",
}


def _child(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ema_lint", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_inputs_that_would_crash_the_parser_are_ema901_in_a_normal_run(tmp_path: Path) -> None:
    for name, body in CRASHERS.items():
        (tmp_path / f"{name.replace(' ', '_')}.py").write_text(HEADER + body + "\n" + FINDING)
    (tmp_path / "train.py").write_text(BAD)
    result = _child("--isolated", "--unsafe-fixes", "--fix", str(tmp_path))
    assert result.returncode == 1, result.stderr[-2000:]  # findings left, no crash, no error
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stdout.splitlines() if "EMA901" in line]
    assert len(lines) == len(CRASHERS), result.stdout
    for line in lines:
        assert (
            "too many nested parentheses" in line
            or "too many levels of indentation" in line
            or "nested too deeply" in line
        ), line
    # The run went on: the ordinary file was fixed, the refused ones were not touched.
    assert "decay=0.999)" in (tmp_path / "train.py").read_text()
    assert (tmp_path / "plus.py").read_text().endswith(FINDING)


def test_the_limits_are_cpython_s_for_brackets_and_indentation() -> None:
    deepest = "x = " + "(" * limits.MAX_BRACKETS + "1" + ")" * limits.MAX_BRACKETS + "\n"
    compile(deepest, "<test>", "exec")
    assert limits.check(deepest) is None
    too_deep = "x = " + "[" * (limits.MAX_BRACKETS + 1) + "1" + "]" * (limits.MAX_BRACKETS + 1)
    with pytest.raises(SyntaxError, match="too many nested parentheses"):
        compile(too_deep, "<test>", "exec")
    refusal = limits.check(too_deep + "\n")
    assert refusal is not None and refusal.message == "too many nested parentheses"
    assert (refusal.line, refusal.column) == (1, 5 + limits.MAX_BRACKETS)

    def blocks(levels: int) -> str:
        return "".join(" " * i + "if a:\n" for i in range(levels)) + " " * levels + "pass\n"

    compile(blocks(limits.MAX_INDENT - 1), "<test>", "exec")
    assert limits.check(blocks(limits.MAX_INDENT - 1)) is None
    with pytest.raises(SyntaxError, match="too many levels of indentation") as raised:
        compile(blocks(limits.MAX_INDENT), "<test>", "exec")
    refusal = limits.check(blocks(limits.MAX_INDENT))
    assert refusal is not None and refusal.message == "too many levels of indentation"
    assert refusal.line == raised.value.lineno


@pytest.mark.parametrize(
    "source",
    [
        "x = [" + ", ".join(str(-i) + ".5" for i in range(20000)) + "]\n",
        "y = " + " + ".join(f"{i}.5 * x ** {i} * z" for i in range(200)) + "\n",
        "f(" + ", ".join(f"a{i}.b.c(d)[e]" for i in range(3000)) + ")\n",
        "help = (\n" + "".join(f"    'line {i} '\n" for i in range(300)) + ")\n",
        "if a:\n    pass\n" + "elif b:\n    pass\n" * 200 + "else:\n    pass\n",
        "s = '(((((' + \"[[[[\" + '''{{{{''' + f'(({x}))'  # brackets in strings\n" * 100,
        "# ((((((((((((((((((((((\n" * 300,
    ],
    ids=[
        "flat-list",
        "polynomial",
        "many-arguments",
        "implicit-concat",
        "elif-200",
        "strings",
        "comments",
    ],
)
def test_long_but_shallow_code_is_not_refused(source: str) -> None:
    assert limits.check(source) is None
    assert limits.check(source.encode()) is None


def test_no_fixture_and_no_module_of_ema_lint_is_refused() -> None:
    sources = [*FIXTURES.rglob("*.py"), *(ROOT / "ema_lint").rglob("*.py")]
    refused = {str(p): limits.check(p.read_bytes()) for p in sources}
    assert not {p: r for p, r in refused.items() if r is not None}


def _settings(unsafe: bool = True) -> engine.FileSettings:
    return engine.FileSettings(rules=(registry.by_code()["EMA101"],), unsafe_fixes=unsafe)


def test_nesting_past_the_recursion_limit_is_no_traceback() -> None:
    # The estimate (chains by precedence) undercounts a long product inside a long sum: this
    # passes the guard and parses. Positions are computed for the reported statement only,
    # so the finding below the deep one is reported; the fix, which regenerates the module,
    # cannot descend that far: EMA903, and the file is unchanged.
    source = HEADER + "x = " + " * ".join(["a"] * 300) + " + b" * 300 + "\n" + FINDING
    assert limits.check(source) is None
    found = engine.lint(source, "deep.py", _settings())
    assert [d.code for d in found] == ["EMA101"]
    outcome = engine.fix(source, "deep.py", _settings())
    assert outcome.fixed == source
    assert sorted(d.code for d in outcome.diagnostics) == ["EMA101", "EMA903"]


def test_a_fix_too_deep_to_apply_is_ema903_and_the_file_is_unchanged() -> None:
    # Positions can be generated, but the fixer cannot descend to the decay literal.
    source = HEADER + "x = ModelEmaV2(m, decay=0.99)" + " * a" * 200 + " + b" * 220 + "\n"
    assert limits.check(source) is None
    assert [d.code for d in engine.lint(source, "deep.py", _settings())] == ["EMA101"]
    outcome = engine.fix(source, "deep.py", _settings())
    assert outcome.fixed == source
    codes = sorted(d.code for d in outcome.diagnostics)
    assert codes == ["EMA101", "EMA903"]
    error = next(d for d in outcome.diagnostics if d.code == "EMA903")
    assert "nested too deeply" in error.message and "EMA101" in error.message
