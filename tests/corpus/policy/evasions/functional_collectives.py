# Evasion: the functional collectives module (a different entry point to the same collectives).
# expect: forbidden-module@5
# expect: forbidden-module@10 in my_allreduce
import torch
import torch.distributed._functional_collectives as funcol
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    summed = funcol.all_reduce(tensor, "sum", list(range(dist.get_world_size())))
    tensor.copy_(summed)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
