"""Hypothesis profiles for the property-based tests, chosen with ``HYPOTHESIS_PROFILE``; and the
fidelity corpus's full-mode grades, shared by the tests that compare against them (``full_grades``).

``default`` is small and derandomized: ``.ci/run`` and ``scripts/test.sh`` try the same inputs on
every run, so a result never depends on the day.  ``long`` searches fifty times more inputs, at
random, for a local run before a release (``HYPOTHESIS_PROFILE=long pytest tests/test_properties_*``).
Neither has a deadline: a slow example on a loaded machine is not a failure (speed lives in
benchmarks).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.fidelity import FullGrades

settings.register_profile(
    "default", max_examples=20, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("long", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def full_grades() -> FullGrades:
    """The fidelity corpus's full-mode grades, shared by every test that needs one (see ``tests.fidelity``)."""
    return FullGrades()
