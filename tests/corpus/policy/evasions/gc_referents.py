# Evasion: find the unwrapped collective among the wrapper's referents with the garbage collector.
# expect: forbidden-collective@11 in my_allreduce
# expect: guard-tampering@11 in my_allreduce
import gc

import torch
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    inner = [obj for obj in gc.get_referents(dist.all_reduce) if callable(obj)]
    inner[0](tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
