"""Sources: files that are not plain Python, turned into lintable Python and mapped back.

A source reads one kind of file (a Jupyter notebook, a YAML training config), hands the
engine ordinary Python text, and maps what the engine says back into the file: each
finding's position, each fix. Rules never know where their module came from. Plain
``.py``/``.pyi`` files need no source: the runner hands their bytes to the engine directly.
"""

from __future__ import annotations

from .base import Source, SourceOutcome

__all__ = ["Source", "SourceOutcome", "for_path", "suffixes"]


def _sources() -> tuple[Source, ...]:
    from . import notebook, yaml_config

    return (notebook.SOURCE, yaml_config.SOURCE)


def for_path(path: str) -> Source | None:
    """The source that reads ``path`` (by suffix), or None for Python files."""
    lowered = path.lower()
    for source in _sources():
        if lowered.endswith(source.suffixes):
            return source
    return None


def suffixes() -> tuple[str, ...]:
    """Every suffix a source reads: directory discovery includes these files."""
    return tuple(s for source in _sources() for s in source.suffixes)
