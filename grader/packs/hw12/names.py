"""Names of the tensors a Part 1 case sends and expects back, shared by both sides.

A wrong answer's message quotes the name, so it says which thread, which call and which run.
"""

from __future__ import annotations


def call(thread: int, k: int, op: str, run: int, runs: int) -> str:
    """``thread 2: all_reduce(mean) #3, run 2``: thread ``thread``'s ``k``-th call (from 0)."""
    what = "all_gather" if op == "all_gather" else f"all_reduce({op})"
    return f"thread {thread}: {what} #{k + 1}" + (f", run {run + 1}" if runs > 1 else "")


def item(name: str, j: int) -> str:
    """The ``j``-th tensor of an all_gather's list."""
    return f"{name}, item {j}"


def length(name: str) -> str:
    return f"{name}, length of the list"


def input_after(name: str) -> str:
    """The tensor a thread passed to a call, as it is after every thread's call returned."""
    return f"{name}, its input after the call"
