"""Odd file contents: a clear one-line finding or nothing, never a traceback or a damaged file.

Already covered elsewhere (not repeated here): invalid UTF-8 (tests/cli/test_check.py
``test_invalid_encoding_is_ema901``), stdin that is not text (``test_stdin_that_is_not_text``),
a BOM with CRLF and a latin-1 cookie under ``--fix`` (tests/engine/test_engine.py
``test_bytes_keep_bom_cookie_and_line_endings``), tab columns (``test_tabs_and_unicode_columns``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ema_lint import limits
from tests.samples import BAD

HEADER = b"from timm.utils import ModelEmaV2\n"
FINDING = b"ema = ModelEmaV2(model, decay=0.99)\n"


def _untouched(path: Path, run, *args: str) -> tuple[int, str]:
    """Run --fix on ``path``; assert its bytes and mtime did not change."""
    before = path.read_bytes()
    stamp = path.stat().st_mtime_ns - 10**9
    os.utime(path, ns=(stamp, stamp))
    result = run("--fix", "--unsafe-fixes", *args, path.name, cwd=path.parent)
    assert "Traceback" not in result.out + result.err
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == stamp
    return result.code, result.out


@pytest.mark.parametrize(
    "content",
    [b"", b"\n", b"# ModelEmaV2 is named only in a comment\n# and here\n", b"\xef\xbb\xbf"],
    ids=["empty", "newline", "comments-only", "bom-only"],
)
def test_files_with_no_code_pass_and_are_not_touched(run, project: Path, content: bytes) -> None:
    path = project / "empty.py"
    path.write_bytes(content)
    code, out = _untouched(path, run)
    assert code == 0 and "All checks passed!" in out


def test_nul_byte_is_ema901_at_the_byte(run, project: Path) -> None:
    path = project / "nul.py"
    path.write_bytes(HEADER + b"x = 1\0\n" + FINDING)
    code, out = _untouched(path, run)
    assert code == 1
    assert "nul.py:2:6: EMA901 cannot parse: the file contains a NUL byte" in out


def test_binary_content_is_ema901(run, project: Path) -> None:
    path = project / "weights.py"
    path.write_bytes(bytes(range(256)) * 40 + b"timm.ModelEmaV2" + bytes(range(255, -1, -1)))
    code, out = _untouched(path, run)
    assert code == 1
    [line] = [x for x in out.splitlines() if "EMA901" in x]
    assert line.startswith("weights.py:2:118: EMA901 cannot decode as utf-8: byte 0x80")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"# -*- coding: klingon -*-\n" + HEADER, "unknown encoding"),
        (b"\xef\xbb\xbf# coding: latin-1\n" + HEADER, "cannot decode"),
        (b"# coding: latin-1\n" + HEADER + b"\x1a\n", "non-printable character"),
        (HEADER + b"x = '\xe2\x80\xa8'\n" + b"\xe2\x80\xa8" + FINDING, "U+2028"),
    ],
    ids=["unknown-cookie", "bom-and-latin-1-cookie", "ctrl-z", "line-separator"],
)
def test_undecodable_or_odd_text_is_one_ema901(
    run, project: Path, data: bytes, message: str
) -> None:
    path = project / "odd.py"
    path.write_bytes(data)
    code, out = _untouched(path, run)
    assert code == 1
    [line] = [x for x in out.splitlines() if x.startswith("odd.py:")]
    assert "EMA901" in line and message in line


def test_latin1_cookie_positions_count_characters(run, project: Path) -> None:
    path = project / "latin.py"
    path.write_bytes(
        b"# -*- coding: latin-1 -*-\n" + HEADER + b"caf\xe9 = ModelEmaV2(m, decay=0.99)\n"
    )
    result = run("--unsafe-fixes", "latin.py", cwd=project)
    assert "latin.py:3:28: EMA101 [*]" in result.out
    run("--fix", "--unsafe-fixes", "latin.py", cwd=project)
    assert path.read_bytes().endswith(b"caf\xe9 = ModelEmaV2(m, decay=0.999)\n")


def test_bom_does_not_shift_columns_on_the_first_line(run, project: Path) -> None:
    (project / "bom.py").write_bytes(
        b"\xef\xbb\xbffrom timm.utils import ModelEmaV2; e = ModelEmaV2(m, decay=0.99)\n"
    )
    assert "bom.py:1:60: EMA101" in run("bom.py", cwd=project).out


@pytest.mark.parametrize(
    "newlines",
    [
        (b"\r\n", b"\n", b"\r", b"\r\n"),
        (b"\r", b"\r", b"\r", b"\r"),
        (b"\n", b"\r\n", b"\n", b"\r"),
        (b"\r\n", b"\r\n", b"\r\n", b""),
    ],
    ids=["mixed", "cr-only", "lf-crlf-then-final-cr", "crlf-no-final-newline"],
)
def test_fix_keeps_every_line_ending(run, project: Path, newlines: tuple[bytes, ...]) -> None:
    lines = [b"from timm.utils import ModelEmaV2", b"x = 1", FINDING.strip(), b"y = 2"]
    path = project / "endings.py"
    path.write_bytes(b"".join(line + end for line, end in zip(lines, newlines, strict=True)))
    result = run("--fix", "--unsafe-fixes", "endings.py", cwd=project)
    assert result.code == 0, result.out
    lines[2] = lines[2].replace(b"0.99)", b"0.999)")
    assert path.read_bytes() == b"".join(
        line + end for line, end in zip(lines, newlines, strict=True)
    )


def test_fix_keeps_form_feeds_and_tabs_elsewhere(run, project: Path) -> None:
    """libcst drops a form feed before a statement when it regenerates a module."""
    original = (
        HEADER
        + b"\x0cdef build(model):\n"
        + b"\tif model:\n"
        + b"\t\tx = 1\n"
        + b"\t\treturn ModelEmaV2(model, decay=0.99)\n"
        + b"\x0c\n"
        + b"   \x0cy = 2\r"
    )
    path = project / "paged.py"
    path.write_bytes(original)
    result = run("--fix", "--unsafe-fixes", "paged.py", cwd=project)
    assert result.code == 0, result.out
    assert path.read_bytes() == original.replace(b"0.99)", b"0.999)")


def test_five_megabytes_without_triggers_are_skipped_quickly(run, project: Path) -> None:
    path = project / "table.py"
    row = b"ROW_%07d = [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5]\n"
    path.write_bytes(b"".join(row % i for i in range(5 * 10**6 // len(row % 0) + 1)))
    assert path.stat().st_size > 5 * 10**6
    code, out = _untouched(path, run)
    assert code == 0 and "All checks passed!" in out


def test_five_megabytes_with_triggers_are_refused_not_parsed(run, project: Path) -> None:
    path = project / "generated.py"
    block = HEADER + FINDING + b"".join(b"x%d = %d\n" % (i, i) for i in range(5000))
    path.write_bytes(block * (5 * 10**6 // len(block) + 1))
    code, out = _untouched(path, run)
    assert code == 1
    size = path.stat().st_size / 1e6
    limit = limits.MAX_PARSE_BYTES / 1e6
    assert (
        f"generated.py:1:1: EMA901 cannot parse: the file is {size:.1f} MB; "
        f"ema-lint parses files up to {limit:.0f} MB" in out
    )


def test_a_function_of_ten_thousand_statements(run, project: Path) -> None:
    body = b"".join(b"    x = %d\n" % (i % 10) for i in range(10_000))
    path = project / "long.py"
    path.write_bytes(HEADER + b"def build(model, x):\n" + body + b"    " + FINDING)
    result = run("--unsafe-fixes", "--fix", "--output-format", "json", "long.py", cwd=project)
    assert result.code == 0, result.out
    assert (
        path.read_bytes()
        == HEADER
        + b"def build(model, x):\n"
        + body
        + b"    "
        + FINDING.replace(b"0.99)", b"0.999)")
    )


def test_a_tab_indented_file_keeps_its_tabs(run, project: Path) -> None:
    source = BAD.replace("ema = ", "if True:\n\tema = ").encode()
    path = project / "tabs.py"
    path.write_bytes(source)
    assert run("--fix", "--unsafe-fixes", "tabs.py", cwd=project).code == 0
    assert path.read_bytes() == source.replace(b"0.99)", b"0.999)")
