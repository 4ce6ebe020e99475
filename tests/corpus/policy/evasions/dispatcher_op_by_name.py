# Evasion: the functional collective ops fetched by their dispatcher name, not through torch.ops.
# The all-reduce is awaited (wait_tensor, also by name), so it really computes the sum.
# expect: forbidden-module@12 in my_allreduce
# expect: forbidden-module@13 in my_allreduce
# expect: forbidden-module@13 in my_allreduce
# expect: forbidden-module@21 in my_allgather
import torch
import torch.distributed as dist


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    op, _ = torch._C._jit_get_operation("_c10d_functional::all_reduce")
    tensor.copy_(torch._C._jit_get_operation("_c10d_functional::wait_tensor")[0](op(tensor, "sum", "0")))
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    world = dist.get_world_size()
    group = dist.group.WORLD.group_name
    # torch._ops.ops is torch.ops under another name.
    return torch._ops.ops._c10d_functional.all_gather_into_tensor(tensor, world, group)


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
