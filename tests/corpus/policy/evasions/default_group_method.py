# Evasion: the collective called as a method of the default process group.
# expect: process-group-method@9 in my_allreduce
import torch
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    group = dist.distributed_c10d._get_default_group()
    group.allreduce([tensor]).wait()
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
