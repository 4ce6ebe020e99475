"""The hidden matrix of Assignment 4.  Run by ``grader.runner`` as its own pytest session."""

from __future__ import annotations


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
