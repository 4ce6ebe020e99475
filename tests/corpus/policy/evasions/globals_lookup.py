# Evasion: the alias fetched back out of globals() by a string key.
# expect: dynamic-dist-access@9 in my_allreduce
import torch
import torch.distributed as dist  # noqa: F401  (reached through globals())


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    name = "di" + "st"
    globals()[name].all_reduce(tensor)
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
