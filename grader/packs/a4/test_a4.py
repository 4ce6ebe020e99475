"""The hidden matrix of Assignment 4.  Run by ``grader.runner`` as its own pytest session."""

from __future__ import annotations

import pytest

from grader.packs.a4.catalog import cases_of


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    cases = cases_of(metafunc.function.__name__)
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_single_step(case, check):
    check(case)


def test_grad_accumulation(case, check):
    check(case)


def test_data_parallel(case, check):
    check(case)


def test_broadcast_parallel(case, check):
    check(case)


def test_gather_parallel(case, check):
    check(case)


def test_column_parallel_shard(case, check):
    check(case)


def test_column_parallel_output(case, check):
    check(case)


def test_column_parallel_step(case, check):
    check(case)


def test_column_parallel_input_grad(case, check):
    check(case)
