"""Names that look like collectives but are the student's own: locals, functions, functools.reduce."""

import functools
import operator

import torch
import torch.distributed as dist


def all_reduce(values):
    """A local helper that happens to share the built-in's name."""
    return functools.reduce(operator.add, values)


def reduce(a, b):
    return a + b


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    world_size = dist.get_world_size()
    gather = [torch.empty_like(tensor) for _ in range(world_size)]
    gather[dist.get_rank()] = tensor.clone()
    for peer in range(world_size):
        if peer != dist.get_rank():
            dist.send(tensor.contiguous(), peer)
            dist.recv(gather[peer], peer)
    tensor.copy_(all_reduce(gather))
    return tensor


def my_allgather(tensor):
    scatter = functools.reduce(reduce, [1, 2, 3])
    return tensor.repeat(scatter, 1)


def my_broadcast(tensor, src=0): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
