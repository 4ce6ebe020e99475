"""The hidden matrix of Assignment 9.  Run by ``grader.runner`` as its own pytest session.

Each test is one line: its cases (``catalog.py``'s, parametrized by ``grader.matrix.plugin``) are run
by the plugin's ``check`` fixture, which forks the ranks, compares in this process and records the
verdict as JUnit properties.  This module never imports student code.
"""

from __future__ import annotations


def test_broadcast(case, check): check(case)
def test_broadcast_noncontig(case, check): check(case)
def test_broadcast_inplace(case, check): check(case)
def test_allreduce(case, check): check(case)
def test_allreduce_noncontig(case, check): check(case)
def test_allreduce_inplace(case, check): check(case)
def test_allgather(case, check): check(case)
def test_allgather_noncontig(case, check): check(case)
def test_allgather_input_untouched(case, check): check(case)
def test_reduce_scatter(case, check): check(case)
def test_reduce_scatter_noncontig(case, check): check(case)
def test_all_to_all(case, check): check(case)
def test_all_to_all_noncontig(case, check): check(case)
def test_all_to_all_input_untouched(case, check): check(case)
def test_tensor_parallel(case, check): check(case)
def test_tensor_parallel_shards(case, check): check(case)
def test_ulysses(case, check): check(case)
def test_trace_broadcast(case, check): check(case)
def test_trace_allreduce(case, check): check(case)
def test_trace_all_to_all(case, check): check(case)
def test_trace_tensor_parallel(case, check): check(case)
def test_trace_ulysses(case, check): check(case)
