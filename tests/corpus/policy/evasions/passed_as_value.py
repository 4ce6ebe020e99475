# Evasion: the collective passed as an argument and called by a generic helper.
# expect: forbidden-collective@10 in _apply
# expect: forbidden-collective@15 in my_allreduce
# expect: forbidden-collective@15 in my_allreduce
import torch
import torch.distributed as dist


def _apply(op, tensor):
    op(tensor)
    return tensor


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    return _apply(dist.all_reduce, tensor)


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
