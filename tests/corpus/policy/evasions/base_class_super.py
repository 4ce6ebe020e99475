# Evasion: the collective in a base-class method, reached through super() from a subclass.
# expect: forbidden-collective@11 in sync
# expect: forbidden-collective@17 in sync
# expect: forbidden-collective@21 in my_allreduce
import torch
import torch.distributed as dist


class _Base:
    def sync(self, tensor):
        dist.all_reduce(tensor)


class _Ring(_Base):
    def sync(self, tensor):
        # "Our ring implementation" simply defers to the base class.
        super().sync(tensor)


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    _Ring().sync(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
