"""Quality benchmark: ema-lint's precision and recall on labelled real files and mutants.

Run with ``python -m benchmarks.quality`` (see benchmarks/README.md). It only runs the
``ema-lint`` command line, as a user would, so it measures any version of ema-lint.
"""
