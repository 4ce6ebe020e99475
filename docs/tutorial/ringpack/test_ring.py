"""The tutorial pack's matrix as pytest sees it: one line per family, run by the engine's ``check``
fixture, parametrized with the catalog's cases.  Nothing here imports a student's code."""

from __future__ import annotations


def test_ring_send_right(case, check):
    check(case)


def test_ring_reduce_scatter(case, check):
    check(case)


def test_ring_all_gather(case, check):
    check(case)
