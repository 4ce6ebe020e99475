"""The word grader in comments, strings and the student's own names: none of it touches the grader.

The grader checks this file (grader.matrix runs it); "import grader" in a docstring is just text.
"""

import logging

import torch
import torch.distributed as dist

log = logging.getLogger("grader")  # a logger's name, not a module
NOTES = {"grader": "grader.matrix.catalog", "hint": "see grader/static_checks.py"}


class Reviewer:
    def __init__(self, grader="peer"):
        self.grader = grader  # who reviews this rank's output

    def note(self):
        return f"{self.grader} checked rank {dist.get_rank()}"


def my_broadcast(tensor: torch.Tensor, src: int = 0, grader=None) -> torch.Tensor:
    # The grader calls this on every rank; rank `src` sends, the others receive.
    grader = grader or Reviewer()
    if dist.get_rank() == src:
        for peer in range(dist.get_world_size()):
            if peer != src:
                dist.send(tensor, peer)
    else:
        dist.recv(tensor, src)
    log.debug("%s: %s", NOTES["grader"], grader.note())
    return tensor


def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
