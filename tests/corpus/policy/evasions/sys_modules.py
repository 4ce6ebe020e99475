# Evasion: torch.distributed fetched from sys.modules without importing it.
# expect: dynamic-dist-access@10 in my_allgather
# expect: forbidden-collective@12 in my_allgather
import sys

import torch


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    comm = sys.modules["torch.distributed"]
    parts = [torch.empty_like(tensor) for _ in range(comm.get_world_size())]
    comm.all_gather(parts, tensor)
    return torch.cat(parts)


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allreduce(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
