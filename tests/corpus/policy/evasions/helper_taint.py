# Evasion: the collective hidden two helper calls below the graded function.
# expect: forbidden-collective@11 in _accumulate
# expect: forbidden-collective@16 in _combine
# expect: forbidden-collective@21 in my_allreduce
import torch
import torch.distributed as dist


def _accumulate(buffer):
    """Adds the other ranks' contributions into ``buffer``."""
    dist.all_reduce(buffer)


def _combine(tensor):
    buffer = tensor.clone()
    _accumulate(buffer)
    return buffer


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    tensor.copy_(_combine(tensor))
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
