"""The project across files: the layer above the per-file facts.

``resolution`` finds the file an import names, ``summaries`` records what a module tells
the others (never a syntax tree), ``model`` links one module to the summaries of the modules
it imports and of the modules that call it. Rules never use this package directly: the
layers below ask ``FileContext.project`` (a ``ProjectLink``).
"""

from .model import ProjectLink, use_directory
from .resolution import ModuleFile, module_for_path, resolve
from .summaries import ModuleSummary, summarize

__all__ = [
    "ModuleFile",
    "ModuleSummary",
    "ProjectLink",
    "module_for_path",
    "resolve",
    "summarize",
    "use_directory",
]
