# Evasion: a collective imported under another name.
# expect: forbidden-collective@11 in my_allgather
import torch
import torch.distributed as dist
from torch.distributed import all_gather as g


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate every rank's tensor along dim 0."""
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    g(parts, tensor.contiguous())
    return torch.cat(parts)


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allreduce(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
