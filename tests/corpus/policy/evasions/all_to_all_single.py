# Evasion: the built-in all-to-all (the handout's own Ulysses needs my_all_to_all instead).
# expect: forbidden-collective@13 in my_all_to_all
import torch
import torch.distributed as dist


def my_all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    world_size = dist.get_world_size()
    chunks = tensor.chunk(world_size, dim=scatter_dim)
    flat = torch.cat([c.contiguous().view(-1) for c in chunks])
    received = torch.empty_like(flat)
    # all_to_all_single is also a collective, even though its name says "single"
    dist.all_to_all_single(received, flat)
    pieces = [p.view(chunks[0].shape) for p in received.chunk(world_size)]
    return torch.cat(pieces, dim=gather_dim)


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
