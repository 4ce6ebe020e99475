# Evasion: getattr with a constant name is just an attribute access in disguise.
# expect: forbidden-collective@8 in my_broadcast
import torch
import torch.distributed as dist


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    getattr(dist, "broadcast")(tensor, src)
    return tensor


# The other collectives are the untouched stubs.
def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
