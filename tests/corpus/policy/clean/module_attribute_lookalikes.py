"""Attributes that share a name with a module alias but are ordinary values: torch.dist is a distance,
a tensor's .dist too, os.sys.platform is only a string, and a sampler class of
torch.utils.data.distributed runs no collective."""

import collections
import os

import torch
import torch.distributed as dist
import torch.utils.data.distributed as sampler_module


def distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    dist_ab = torch.dist(a, b)  # the p-norm distance, not torch.distributed
    return dist_ab + a.dist(b) + torch.cdist(a[None], b[None]).sum()


def describe() -> str:
    counts = collections.Counter(os.sys.platform)
    return f"{sampler_module.DistributedSampler.__name__} {sorted(counts)}"


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    world_size, rank = dist.get_world_size(), dist.get_rank()
    parts = [torch.empty_like(tensor) for _ in range(world_size)]
    parts[rank] = tensor.clone()
    for peer in range(world_size):
        if peer != rank:
            dist.send(tensor.contiguous(), peer)
            dist.recv(parts[peer], peer)
    tensor.copy_(torch.stack(parts).sum(0))
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
