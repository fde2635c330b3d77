"""``ema-lint server``: a language server (LSP over stdio) for editors.

It lints open ``.py``, ``.ipynb`` and YAML config documents with the engine and the settings
of each file's project configuration, as ``ema-lint check`` does, and offers the fixes as
code actions. pygls and lsprotocol are the optional ``server`` extra: without them the
command says so in one line.
"""

from __future__ import annotations

from typing import TextIO

MISSING_EXTRA = "the language server needs the server extra: pip install 'ema-lint[server]'"


def serve(stderr: TextIO) -> int:
    """Run the server on stdin/stdout until the client exits; 2 if pygls is missing."""
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        stderr.write(f"ema-lint: error: {MISSING_EXTRA}\n")
        return 2
    from .protocol import create

    create().start_io()
    return 0
