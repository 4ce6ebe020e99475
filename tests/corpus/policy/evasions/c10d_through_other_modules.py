# Evasion: the C++ bindings reached through the torch._C another torch module holds, and a process
# group method through a private c10d module's alias.
# expect: process-group-method@12 in my_allreduce
# expect: forbidden-collective@17 in my_broadcast
import torch
import torch._custom_op.impl as impl
import torch.distributed.c10d_logger as logger


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    group = logger.dist.group.WORLD
    impl._C._distributed_c10d.ProcessGroup.allreduce(group, [tensor])
    return tensor


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    logger.dist.distributed_c10d.broadcast(tensor, src)
    return tensor


# The other collectives are the untouched stubs.
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
