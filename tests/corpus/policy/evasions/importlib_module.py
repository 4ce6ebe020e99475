# Evasion: torch.distributed imported by string at run time.
# expect: dynamic-dist-access@10 in my_allreduce
# expect: forbidden-collective@10 in my_allreduce
import importlib

import torch


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    importlib.import_module("torch.distributed").all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
