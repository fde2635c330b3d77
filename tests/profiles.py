"""Hypothesis settings profiles for the property and generated-program tests.

``ci`` (the default) keeps the whole suite within a few minutes on 2 cores and is
derandomized, so a CI run is reproducible; ``thorough`` explores 20 times as many examples
with fresh randomness; ``dev`` is for quick iteration. Choose one with
``pytest --hypothesis-profile=thorough`` or ``EMA_LINT_HYPOTHESIS_PROFILE=thorough``.

Tests whose examples are expensive ask for a share of the profile's budget with
:func:`examples`, so every test scales with the profile instead of pinning a count.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,  # parsing generated programs takes a variable, sometimes long, time
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=100, derandomize=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.register_profile("dev", max_examples=20, **_COMMON)
settings.load_profile(os.environ.get("EMA_LINT_HYPOTHESIS_PROFILE", "ci"))


def examples(share: float) -> int:
    """A share of the active profile's example budget (at least 5)."""
    return max(5, int(settings.default.max_examples * share))
