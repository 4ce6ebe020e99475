# Evasion: the builtin __import__ instead of an import statement.
# expect: dynamic-dist-access@8 in my_allreduce
# expect: forbidden-collective@8 in my_allreduce
import torch


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    __import__("torch.distributed", fromlist=["all_reduce"]).all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
