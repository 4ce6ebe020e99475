# Evasion: a point-to-point broadcast that "just" adds a barrier, itself a collective.
# expect: forbidden-collective@16 in my_broadcast
import torch
import torch.distributed as dist


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if rank == src:
        for peer in range(world_size):
            if peer != src:
                dist.send(tensor, peer)
    else:
        dist.recv(tensor, src)
    # make sure everyone is done
    dist.barrier()
    return tensor


# The other collectives are the untouched stubs.
def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
