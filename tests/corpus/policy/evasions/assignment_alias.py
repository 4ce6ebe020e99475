# Evasion: collectives reached through assigned names; the use is reported, not the alias.
# expect: forbidden-collective@14 in my_allreduce
# expect: forbidden-collective@22 in my_reduce_scatter
import torch
import torch.distributed as dist

d = dist
reduce_scatter_fn = d.reduce_scatter


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    f = dist.all_reduce
    if tensor.numel():
        f(tensor)
    return tensor


def my_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    world_size = d.get_world_size()
    chunks = list(tensor.chunk(world_size))
    out = torch.empty_like(chunks[0])
    reduce_scatter_fn(out, chunks)
    return out


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
