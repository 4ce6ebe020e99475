# Evasion: the world group kept on a helper object, its collective method called elsewhere.
# expect: process-group-method@14 in reduce_sum
# expect: process-group-method@18 in my_allreduce
import torch
import torch.distributed as dist


class _Communicator:
    def __init__(self, group=None):
        self.group = group if group is not None else dist.group.WORLD

    def reduce_sum(self, tensor):
        # Looks like a method of our own class; self.group is the process group.
        self.group.allreduce([tensor]).wait()


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    _Communicator().reduce_sum(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
