# Evasion: the collective fetched back out of a container literal by indexing it.
# expect: forbidden-collective@10 in my_allreduce
# expect: forbidden-collective@15 in my_broadcast
# expect: forbidden-collective@22 in my_allgather
import torch
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    (dist,)[0].all_reduce(tensor)
    return tensor


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    {"comm": dist}["comm"].broadcast(tensor, src)
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    parts = [torch.empty_like(tensor) for _ in range(world)]
    getattr([torch][-1], "distributed").all_gather(parts, tensor)
    return torch.cat(parts)


# The other collectives are the untouched stubs.
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
