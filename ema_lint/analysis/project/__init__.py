"""The project across files: the layer above the per-file facts.

``resolution`` finds the file an import names, ``summaries`` records what a module tells
the others (never a syntax tree), ``model`` links one module to the summaries of the modules
it imports and of the modules that call it (``ProjectLink``), ``admission`` tells the
pre-filter which files import a module about averaging. Rules never use this package: the
layers below ask ``FileContext.project``. The package itself imports nothing, so the cheap
paths (``admission``, ``resolution``) stay free of libcst.
"""
