# Evasion: a star import, so the collective appears as a bare name.
# expect: forbidden-collective@8 in my_allreduce
import torch
from torch.distributed import *  # noqa: F403


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    all_reduce(tensor)  # noqa: F405
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
