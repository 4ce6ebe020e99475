# Evasion: vars() of the module, keyed by a string.
# expect: dynamic-dist-access@9 in my_allgather
import torch
import torch.distributed as dist


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    vars(dist)["all_gather"](parts, tensor)
    return torch.cat(parts)


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allreduce(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
