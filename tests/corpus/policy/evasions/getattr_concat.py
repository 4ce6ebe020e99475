# Evasion: the collective's name assembled at run time, so no source text spells it.
# expect: dynamic-dist-access@9 in my_allreduce
import torch
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    name = "all_" + "reduce"
    getattr(dist, name)(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
