"""Rank side: the only module of the pack a rank process imports (the engine's zygote preloads it).

A body calls the student's function with this rank's inputs and returns what it got, as named
tensors.  It decides nothing: the session compares the reply with the expected values it kept.  It
imports nothing of the session side (``catalog``, ``expected``, ``pack``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from grader.runtimes import BadReturn
from ringpack.reference.ring import ring_send_right as known_good_send_right

Tensors = dict[str, torch.Tensor]
Body = Callable[[Any, dict[str, Any], Tensors], Tensors]


# [known-good]
@contextlib.contextmanager
def stand_ins(student: Any, ring: Any, params: dict[str, Any]) -> Iterator[None]:
    """Run a body with the grader's own ``ring_send_right`` (the reference's) in the student's module,
    once the student's failed a case and the session says so (``params["trusted"]``, from the pack's
    ``stand_ins``): a defect of it is charged once, in its own item, and not again in the two
    functions built on it.  The engine's guard is told whose messages it sends."""
    if "ring_send_right" not in params.get("trusted", ()):
        yield
        return
    student.stand_ins[known_good_send_right.__code__] = "ring_send_right"
    saved = getattr(ring, "ring_send_right", None)
    ring.ring_send_right = known_good_send_right
    try:
        yield
    finally:
        ring.ring_send_right = saved


# [/known-good]


# [bodies]
def call(function: str) -> Body:
    """The body of every case of one student function: call it with this rank's ``x``, return ``out``."""

    def body(student: Any, params: dict[str, Any], tensors: Tensors) -> Tensors:
        ring = student.module("ring")
        with stand_ins(student, ring, params):
            out = getattr(ring, function)(tensors["x"])
        if not isinstance(out, torch.Tensor):  # the case is wrong, with this message
            raise BadReturn(f"{function} returned {type(out).__name__}, expected a torch.Tensor")
        return {"out": out}

    return body


BODIES = {
    "send_right": call("ring_send_right"),
    "reduce_scatter": call("ring_reduce_scatter"),
    "all_gather": call("ring_all_gather"),
}
# [/bodies]
