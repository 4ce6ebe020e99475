# Evasion: the collectives' defining module, distributed_c10d, instead of torch.distributed.
# expect: forbidden-collective@10 in my_broadcast
# expect: forbidden-collective@15 in my_allreduce
import torch
import torch.distributed.distributed_c10d as c10d
from torch.distributed.distributed_c10d import all_reduce


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    c10d.broadcast(tensor, src)
    return tensor


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
