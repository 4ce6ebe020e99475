# Evasion: the collective reached through the grader's own modules, imported at the top.
# expect: grader-internals@14 in my_allreduce
# expect: forbidden-collective@14 in my_allreduce
# expect: grader-internals@10
# expect: grader-internals@10 in my_broadcast
# expect: grader-internals@10 in my_allgather
# expect: grader-internals@10 in my_reduce_scatter
# expect: grader-internals@10 in my_all_to_all
import torch
from grader.runtimes.torchdist import guard


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    guard.dist.all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs: the import above runs before each of them.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
