# Evasion: torch.distributed, sys and builtins taken as attributes of other modules, which imported them.
# expect: forbidden-collective@20 in my_allreduce
# expect: forbidden-collective@25 in my_broadcast
# expect: dynamic-dist-access@31 in my_allgather
# expect: forbidden-collective@31 in my_allgather
# expect: forbidden-collective@36 in my_reduce_scatter
# expect: dynamic-dist-access@41 in my_all_to_all
# expect: forbidden-collective@42 in my_all_to_all
import collections
import enum

import torch
import torch.nn.functional as F
import torch.utils.data.distributed as sampler_module
from torch.distributed.c10d_logger import dist as logger_dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    # torch.utils.data.distributed did `import torch.distributed as dist`
    sampler_module.dist.all_reduce(tensor)
    return tensor


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    getattr(F, "torch").distributed.broadcast(tensor, src)  # torch.nn.functional's torch
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(2)]
    collections._sys.modules["torch.distributed"].all_gather(parts, tensor)  # collections' sys
    return torch.cat(parts)


def my_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    logger_dist.reduce_scatter(tensor, list(tensor.chunk(2)))
    return tensor


def my_all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    comm = enum.bltns.__import__("torch.distributed", fromlist=["all_to_all"])  # enum's builtins
    comm.all_to_all(list(tensor.chunk(2)), list(tensor.chunk(2)))
    return tensor
