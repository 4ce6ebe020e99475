# Evasion: the c10d dispatcher op behind the Python collectives, called through torch.ops.
# expect: forbidden-module@9 in my_allreduce
import torch
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    group_name = dist.group.WORLD.group_name
    summed = torch.ops._c10d_functional.all_reduce(tensor, "sum", group_name)
    tensor.copy_(summed)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
