"""The hidden matrix of Assignment 5.  Run by ``grader.runner`` as its own pytest session."""

from __future__ import annotations


def test_assertions(case, check):
    check(case)


def test_tensor_shapes(case, check):
    check(case)


def test_baseline(case, check):
    check(case)


def test_distribute_layers(case, check):
    check(case)


def test_dataloader(case, check):
    check(case)


def test_condition(case, check):
    check(case)


def test_communicate(case, check):
    check(case)


def test_pipelined_forward(case, check):
    check(case)


def test_pipelined(case, check):
    check(case)


def test_output_check(case, check):
    check(case)


def test_gradient_check(case, check):
    check(case)
