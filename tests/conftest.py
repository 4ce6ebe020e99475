"""Hypothesis profiles for the property-based tests, chosen with ``HYPOTHESIS_PROFILE``.

``default`` is small and derandomized: ``.ci/run`` and ``scripts/test.sh`` try the same inputs on
every run, so a result never depends on the day.  ``long`` searches fifty times more inputs, at
random, for a local run before a release (``HYPOTHESIS_PROFILE=long pytest tests/test_properties_*``).
Neither has a deadline: a slow example on a loaded machine is not a failure (speed lives in
benchmarks).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=20, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("long", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
