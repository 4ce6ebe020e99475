"""Harmless torch.distributed use: rank queries, ReduceOp, and the world group passed to send/recv."""

import torch
import torch.distributed as dist


def _peers():
    return [r for r in range(dist.get_world_size()) if r != dist.get_rank()]


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    group = dist.group.WORLD
    assert dist.is_initialized() and dist.get_backend(group) == "gloo"
    assert dist.ReduceOp.SUM is not None
    if dist.get_rank(group) == src:
        for peer in _peers():
            dist.send(tensor, peer, group=group)
    else:
        dist.recv(tensor, src, group=group)
    return tensor


def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
