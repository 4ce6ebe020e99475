"""Names that shadow dist imports in a narrower scope, so they are not torch.distributed there."""

import torch
import torch.distributed as dist
from torch.distributed import broadcast  # noqa: F401  (an unused import is not a use)


def _sum_pairs(dist, values):
    # here `dist` is a plain list of distances, shadowing the module
    return [d + v for d, v in zip(dist, values)]


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    broadcast = torch.empty_like(tensor) if dist.get_rank() != src else tensor
    if dist.get_rank() == src:
        for peer in range(dist.get_world_size()):
            if peer != src:
                dist.send(broadcast, peer)
    else:
        dist.recv(broadcast, src)
        tensor.copy_(broadcast)
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    all_gather = [tensor.clone() for _ in range(dist.get_world_size())]
    summed = _sum_pairs([0] * len(all_gather), [1] * len(all_gather))
    assert len(summed) == len(all_gather)
    return torch.cat(all_gather)


def my_allreduce(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
