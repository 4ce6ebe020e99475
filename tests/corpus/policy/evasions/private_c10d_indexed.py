# Evasion: the C++ binding behind dist's broadcast, reached by indexing a list holding torch._C.
# expect: forbidden-collective@9 in my_broadcast
import torch
import torch.distributed as dist


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    group = dist.group.WORLD
    [torch._C][0]._distributed_c10d._broadcast_coalesced(group, [tensor], 1 << 20, src)
    return tensor


# The other collectives are the untouched stubs.
def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
