"""What a file's bytes say as text, for the pre-filter, before anything is parsed.

The pre-filter matches ASCII triggers on the raw bytes: right for UTF-8 and for every
ASCII-compatible encoding a PEP 263 coding line may declare (latin-1, cp1252, ...). A file
in UTF-16 or UTF-32 (a byte-order mark) or under a coding line whose encoding spells ASCII
differently holds its triggers as other bytes: matched raw, it would pass as "nothing to
check" however much averaging code it holds. Such a file is decoded here first, so that it
reaches the parser and is reported (CPython itself refuses a UTF-16 source: EMA901).
"""

from __future__ import annotations

import codecs
import re

_BOMS = (  # UTF-32 first: its little-endian mark starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


def bom_encoding(data: bytes) -> str | None:
    """``utf-16``/``utf-32`` when ``data`` starts with their byte-order mark, else None."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    return None


def foreign_encoding(data: bytes) -> str | None:
    """The encoding of ``data`` when ASCII text is not spelled as ASCII bytes in it."""
    found = bom_encoding(data)
    if found is not None:
        return found
    if b"coding" not in data[:400]:
        return None
    head = b"\n".join(data.splitlines()[:2])
    cookie = _COOKIE.search(head)
    if cookie is None:
        return None
    name = cookie.group(1).decode("ascii", "replace")
    try:
        spelled = "import".encode(name)
    except (LookupError, UnicodeError, TypeError, ValueError):
        return None  # an unknown encoding: the parser reports it
    return None if spelled == b"import" else name


def text_for_matching(data: bytes | str) -> bytes | str:
    """``data`` as the pre-filter must see it: the bytes themselves, or the decoded text of
    a file whose encoding does not spell ASCII as ASCII."""
    if isinstance(data, str):
        return data
    encoding = foreign_encoding(data)
    if encoding is None:
        return data
    try:
        return data.decode(encoding, "replace")
    except (LookupError, UnicodeError, TypeError, ValueError):
        return data


def bom_message(encoding: str) -> str:
    """Why a file with a UTF-16/32 byte-order mark is not read as Python."""
    return (
        f"cannot decode: the file is {encoding.upper()} (it starts with a byte-order mark); "
        "Python reads source as UTF-8 unless a coding line declares an ASCII-compatible "
        "encoding (PEP 263): save it as UTF-8"
    )
