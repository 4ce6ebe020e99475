# Evasion: the graded function body is clean; its decorator does the collective.
# expect: forbidden-collective@13 in _summed
# expect: forbidden-collective@19 in my_allreduce
import functools

import torch
import torch.distributed as dist


def _summed(fn):
    @functools.wraps(fn)
    def wrapper(tensor):
        dist.all_reduce(tensor)
        return fn(tensor)

    return wrapper


@_summed
def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
