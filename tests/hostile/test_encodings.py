"""Encodings and positions: what the file's bytes say, and lines as the parser counts them.

A UTF-16 file holding averaging code printed "All checks passed!" (the pre-filter matched
its bytes as ASCII); ``--diff`` numbered hunks past a form feed, U+2028 or ``\\x1c`` wrong
(``str.splitlines`` breaks there, the parser does not); indentation CPython accepts but
libcst's tokenizer does not follow gave "EMA901 Syntax Error @ 1:1".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ema_lint import decoding

SOURCE = "from timm.utils import ModelEmaV2\nema = ModelEmaV2(model, decay=0.99)\n"
CLEAN = "# nothing averaged here\nx = 1\n"


@pytest.mark.parametrize(
    ("encoding", "bom", "name"),
    [
        ("utf-16-le", b"\xff\xfe", "UTF-16"),
        ("utf-16-be", b"\xfe\xff", "UTF-16"),
        ("utf-32-le", b"\xff\xfe\x00\x00", "UTF-32"),
        ("utf-32-be", b"\x00\x00\xfe\xff", "UTF-32"),
    ],
)
def test_a_utf16_or_utf32_file_with_averaging_code_is_ema901(
    run, project: Path, encoding: str, bom: bytes, name: str
) -> None:
    path = project / "train.py"
    data = bom + SOURCE.encode(encoding)
    path.write_bytes(data)
    (project / "other.py").write_text(SOURCE)
    result = run("--fix", "--unsafe-fixes", "train.py", "other.py", cwd=project)
    assert result.code == 1 and "All checks passed!" not in result.out
    assert f"train.py:1:1: EMA901 cannot decode: the file is {name} (it starts with a " in (
        result.out
    )
    assert path.read_bytes() == data  # never rewritten
    assert (project / "other.py").read_text() == SOURCE.replace("0.99)", "0.999)")


def test_a_utf16_file_without_averaging_code_passes_unparsed(run, project: Path) -> None:
    (project / "clean.py").write_bytes(b"\xff\xfe" + CLEAN.encode("utf-16-le"))
    result = run("clean.py", cwd=project)
    assert result.code == 0 and "All checks passed!" in result.out


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"ModelEmaV2", b"ModelEmaV2"),
        (b"# -*- coding: latin-1 -*-\nModelEmaV2\n", b"# -*- coding: latin-1 -*-\nModelEmaV2\n"),
        (b"\xef\xbb\xbfModelEmaV2", b"\xef\xbb\xbfModelEmaV2"),
        (b"\xff\xfe" + "ModelEmaV2".encode("utf-16-le"), "ModelEmaV2"),
        (b"# coding: unknown-codec\nx", b"# coding: unknown-codec\nx"),
    ],
    ids=["utf-8", "latin-1-cookie", "utf-8-bom", "utf-16", "unknown-cookie"],
)
def test_the_prefilter_sees_text_in_its_encoding(data: bytes, expected) -> None:
    assert decoding.text_for_matching(data) == expected


def test_a_cookie_that_does_not_spell_ascii_as_ascii_is_decoded() -> None:
    assert decoding.foreign_encoding(b"# coding: utf-16\n") == "utf-16"
    assert decoding.foreign_encoding(b"# coding: cp1252\n") is None


@pytest.mark.parametrize(
    "separator", ["\x0c", "\u2028", "\x1c", "\x1d", "\x85"], ids=["ff", "u2028", "fs", "gs", "nel"]
)
def test_diff_hunks_number_lines_as_the_parser_does(run, project: Path, separator: str) -> None:
    head = "from timm.utils import ModelEmaV2\n"
    body = f"# a comment with {separator} in it\nx = 'one{separator}two'\n"
    text = head + body * 5 + "\n" * 8 + "ema = ModelEmaV2(model, decay=0.99)\n"
    (project / "train.py").write_bytes(text.encode("utf-8"))
    result = run("--diff", "--unsafe-fixes", "train.py", cwd=project)
    [hunk] = re.findall(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", result.out, re.M)
    finding = 1 + 10 + 8 + 1  # the line of the ModelEmaV2 call, counted by the parser
    assert int(hunk[0]) + int(hunk[1]) - 1 == finding
    assert "-ema = ModelEmaV2(model, decay=0.99)\n+ema" in result.out


def test_indentation_python_accepts_but_libcst_does_not_names_the_line(run, project) -> None:
    text = (
        "from timm.utils import ModelEmaV2\n"
        "if a:\n"
        " if b:\n"
        "\t x = 1\n"  # a tab, then a space: CPython accepts it
        "ema = ModelEmaV2(model, decay=0.99)\n"
    )
    compile(text, "train.py", "exec")
    (project / "train.py").write_text(text)
    result = run("train.py", cwd=project)
    [line] = [x for x in result.out.splitlines() if "EMA901" in x]
    assert line.startswith("train.py:4:1: EMA901 cannot parse: libcst's tokenizer stops here (")
    assert "Syntax Error @ 1:1" not in line
    assert line.endswith("the indentation mixes tabs and spaces: indent with spaces only")


def test_a_utf16_yaml_config_is_not_passed_silently(run, project: Path) -> None:
    text = "ema:\n  _target_: timm.utils.ModelEmaV2\n  decay: 0.99\n"
    (project / "c.yaml").write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    result = run("c.yaml", cwd=project)
    assert result.code == 1 and "c.yaml:1:1: EMA901 cannot decode as UTF-8" in result.out
