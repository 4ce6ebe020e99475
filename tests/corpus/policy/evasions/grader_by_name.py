# Evasion: the grader's modules fetched by name at run time, to reach the dist they imported (which
# is torch.distributed: the collective is one too, whatever module it was reached through).
# expect: grader-internals@19 in my_allreduce
# expect: dynamic-dist-access@19 in my_allreduce
# expect: forbidden-collective@19 in my_allreduce
# expect: grader-internals@24 in my_broadcast
# expect: dynamic-dist-access@24 in my_broadcast
# expect: forbidden-collective@24 in my_broadcast
# expect: grader-internals@30 in my_allgather
# expect: dynamic-dist-access@30 in my_allgather
# expect: forbidden-collective@30 in my_allgather
import importlib
import sys

import torch


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    sys.modules["grader.runtimes.torchdist.guard"].dist.all_reduce(tensor)
    return tensor


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    importlib.import_module("grader.runtimes.torchdist.guard").dist.broadcast(tensor, src)
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(2)]
    __import__("grader.runtimes.torchdist.guard", fromlist=["dist"]).dist.all_gather(parts, tensor)
    return torch.cat(parts)


# The other collectives are the untouched stubs.
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
