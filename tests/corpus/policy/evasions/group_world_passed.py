# Evasion: dist.group.WORLD handed to a helper that calls a collective method on it.
# expect: process-group-method@9 in _sum_over
# expect: process-group-method@13 in my_allreduce
import torch
import torch.distributed as dist


def _sum_over(group, tensor):
    return group.allreduce([tensor])


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    _sum_over(dist.group.WORLD, tensor).wait()
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
