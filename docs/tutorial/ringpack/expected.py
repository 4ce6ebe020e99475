"""Session side: each case's inputs and the values every rank must return.

Only the matrix session imports this module.  The expected values and the salt they are drawn with
never reach a rank: a rank is sent its own inputs and nothing else, and its reply is compared here.
"""

from __future__ import annotations

import torch

from grader.pack import Case, Prepared, exact_sum


# [prepare]
def prepare(case: Case, salt: str) -> Prepared:
    """Random inputs drawn from the case's seed under the grading's secret salt (the same case and salt
    always give the same inputs), and what the handout says each rank returns for them."""
    generator = torch.Generator().manual_seed(case.seed(salt))
    ws, chunk = case.world_size, case.params["chunk"]
    size = {"send_right": (3, chunk), "reduce_scatter": (ws * chunk,), "all_gather": (chunk,)}[case.kind]
    xs = [torch.randn(size, generator=generator) for _ in range(ws)]
    if case.kind == "send_right":  # what the left neighbour sent
        outs = [xs[(rank - 1) % ws].clone() for rank in range(ws)]
    elif case.kind == "reduce_scatter":  # chunk `rank` of the sum, summed exactly (float64, rank order)
        outs = list(exact_sum(xs).to(torch.float32).chunk(ws))
    else:  # every rank's chunk, in rank order
        outs = [torch.cat(xs)] * ws
    return Prepared(
        inputs=[{"x": x} for x in xs],
        expected=[{"out": out} for out in outs],
        tensor_bytes=xs[0].numel() * xs[0].element_size(),  # the unit the time budgets are scaled by
        tolerance={"rtol": 1e-5, "atol": 1e-6},  # a ring adds in its own order, not in rank order
    )


# [/prepare]
