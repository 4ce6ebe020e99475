# Evasion: torch.distributed imported under an innocent name.
# expect: forbidden-collective@10 in my_allreduce
import torch
from torch import distributed as comm


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks (the grader must see through the alias)."""
    # comm is torch.distributed
    comm.all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
