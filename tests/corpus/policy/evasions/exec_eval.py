# Evasion: the collective call kept in a string and run with exec/eval.
# expect: dynamic-dist-access@9 in my_broadcast
# expect: dynamic-dist-access@14 in my_allreduce
import torch
import torch.distributed as dist  # noqa: F401  (used inside the strings)


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    eval("dist.broadcast")(tensor, src)
    return tensor


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    exec("dist.all_reduce(tensor)")
    return tensor


# The other collectives are the untouched stubs.
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
