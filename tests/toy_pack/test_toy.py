"""The toy pack's matrix: one line per test, run by the engine's matrix session (``check``)."""

from __future__ import annotations

import pytest

from tests.toy_pack.pack import PACK


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases = PACK.cases_of(metafunc.function.__name__)
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_double(case, check): check(case)
