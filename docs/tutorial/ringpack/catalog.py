"""The tutorial pack's matrix: pure data (no torch), each family of cases beside the handout sentence
that requires it.  A case's name, ``test[id]``, is what the rubric's patterns match."""

from __future__ import annotations

from grader.pack import Case, engine_params

# [sentences]
#: test function -> (the rank-side body that runs it, the handout sentence it checks, verbatim)
FAMILIES = {
    "test_ring_send_right": (
        "send_right",
        "`ring_send_right(x)` sends `x` to rank `(rank + 1) % world_size` and returns the tensor that rank "
        "`(rank - 1) % world_size` sent, with the shape and dtype of `x`.",
    ),
    "test_ring_reduce_scatter": (
        "reduce_scatter",
        "`ring_reduce_scatter(x)` takes a 1-D tensor whose length is a multiple of `world_size`, cut into "
        "`world_size` equal chunks, and returns chunk number `rank` of the elementwise sum of every rank's `x`.",
    ),
    "test_ring_all_gather": (
        "all_gather",
        "`ring_all_gather(chunk)` returns the concatenation, in rank order, of every rank's 1-D `chunk`.",
    ),
}
# [/sentences]

# [cases]
WORLD_SIZES = (2, 3)  # two ranks are a ring already; three tell "right" from "left"
CHUNK = 5  # elements per rank's chunk


def cases() -> list[Case]:
    """Every family at each world size.  ``must_communicate``: ranks that agree without one message
    crossing the wire bypassed send/recv, whatever they return."""
    return [
        Case(test, f"ws{ws}", ws, kind, {"chunk": CHUNK, **engine_params(must_communicate=True)})
        for test, (kind, _sentence) in FAMILIES.items()
        for ws in WORLD_SIZES
    ]


# [/cases]

#: kind -> the student function it exercises (``AssignmentPack.function_of``)
FUNCTION_OF = {kind: test.removeprefix("test_") for test, (kind, _sentence) in FAMILIES.items()}
