# Evasion: the autograd-aware collectives of torch.distributed.nn.
# expect: forbidden-module@5
# expect: forbidden-module@9 in my_allreduce
import torch
import torch.distributed.nn


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    summed = torch.distributed.nn.functional.all_reduce(tensor)
    tensor.copy_(summed)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
