"""The toy pack's matrix: one line per test, run by the engine's matrix session (``check``)."""

from __future__ import annotations


def test_double(case, check): check(case)
