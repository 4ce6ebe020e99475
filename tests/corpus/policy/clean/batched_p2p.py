"""Batched point-to-point: P2POp and batch_isend_irecv are send/recv, not collectives."""

import torch
import torch.distributed as dist
from torch.distributed import P2POp, batch_isend_irecv


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(world_size)]
    parts[rank] = tensor.clone()
    ops = []
    for peer in range(world_size):
        if peer != rank:
            ops.append(P2POp(dist.isend, parts[rank], peer))
            ops.append(dist.P2POp(dist.irecv, parts[peer], peer))
    if ops:
        for request in batch_isend_irecv(ops):
            request.wait()
    return torch.cat(parts)


def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allreduce(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
