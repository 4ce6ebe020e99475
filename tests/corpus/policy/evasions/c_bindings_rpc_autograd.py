# Evasion: the C++ bindings behind torch.distributed.rpc and distributed autograd, which move tensors
# and gradients between ranks without send/recv.
# expect: forbidden-module@11 in my_allgather
# expect: forbidden-module@16 in my_reduce_scatter
import torch
import torch._custom_op.impl as impl


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    # an RPC agent of one's own: its messages are no send/recv
    impl._C._distributed_rpc._set_and_start_rpc_agent(None)
    return tensor


def my_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    torch._C._distributed_autograd.backward(0, [tensor.sum()])
    return tensor


# The other collectives are the untouched stubs.
def my_broadcast(tensor, src=0): raise NotImplementedError
def my_allreduce(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
