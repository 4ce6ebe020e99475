# Evasion: no alias at all, the fully qualified name.
# expect: forbidden-collective@9 in my_allreduce
import torch
import torch.distributed


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    if torch.distributed.get_world_size() > 1:
        torch.distributed.all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
