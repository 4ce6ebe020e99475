# Evasion: empty containers filled elsewhere (append, item assignment in a helper), read later.
# expect: forbidden-collective@24 in my_allreduce
# expect: forbidden-collective@29 in my_broadcast
# expect: forbidden-collective@16 in _register
# expect: forbidden-collective@16 in _register
# expect: forbidden-collective@19
import torch
import torch.distributed as dist

_COMM = []
_COMM.append(dist)
_OPS = {}


def _register():
    _OPS["bcast"] = dist.broadcast  # both _OPS (now holding it) and dist.broadcast are reported


_register()


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    handles = list(_COMM)
    handles[0].all_reduce(tensor)
    return tensor


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    _OPS.get("bcast")(tensor, src)
    return tensor


# The other collectives are the untouched stubs.
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
