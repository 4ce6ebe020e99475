# Evasion: move the data through the rendezvous key-value store instead of send/recv.
# expect: store-access@11 in my_broadcast
import pickle

import torch
import torch.distributed as dist


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    key = "broadcast/payload"
    store = dist.distributed_c10d._get_default_store()
    if dist.get_rank() == src:
        store.set(key, pickle.dumps(tensor.tolist()))
    else:
        tensor.copy_(torch.tensor(pickle.loads(store.get(key)), dtype=tensor.dtype))
    return tensor


# The other collectives are the untouched stubs.
def my_allreduce(tensor): raise NotImplementedError
def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
