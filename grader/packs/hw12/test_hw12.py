"""The hidden matrix of HW12.  Run by ``grader.runner`` as its own pytest session."""

from __future__ import annotations


def test_part1_all_gather(case, check):
    check(case)


def test_part1_all_reduce(case, check):
    check(case)


def test_part1_reuse_and_groups(case, check):
    check(case)


def test_part2_split_batch(case, check):
    check(case)


def test_part2_dp_step(case, check):
    check(case)


def test_part3_1_column_forward(case, check):
    check(case)


def test_part3_1_column_backward(case, check):
    check(case)


def test_part3_2_row_forward(case, check):
    check(case)


def test_part3_2_row_backward(case, check):
    check(case)


def test_part3_3_tp_training(case, check):
    check(case)


def test_part1_inputs_untouched(case, check):
    check(case)
