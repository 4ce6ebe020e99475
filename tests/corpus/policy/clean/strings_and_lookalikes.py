"""Mentions in strings and comments, and look-alike calls: model.eval, re.compile, getattr on our own."""

import re

import torch
import torch.distributed as dist
import torch.nn.functional as F

PATTERN = re.compile(r"dist\.(all_reduce|broadcast)")  # compile a regex, not code
MESSAGE = "do not call dist.all_reduce or dist.barrier here"


class Scaler(torch.nn.Module):
    activation = "gelu"

    def forward(self, x):
        act = getattr(F, self.activation)
        return act(x)

    def evaluate(self, x):
        self.eval()
        return getattr(self, "forward")(x)


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    # TODO: dist.all_reduce(tensor) would be easier, but the handout forbids it.
    note = f"rank {dist.get_rank()} avoided dist.all_reduce"
    assert PATTERN.search(MESSAGE)
    raise NotImplementedError(note)


def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
