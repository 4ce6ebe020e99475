# Evasion: the default group from a private helper of distributed_c10d, then its allreduce method.
# expect: process-group-method@8 in my_allreduce
import torch
import torch.distributed.distributed_c10d as c10d


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    c10d._group_or_default_group().allreduce([tensor]).wait()
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
