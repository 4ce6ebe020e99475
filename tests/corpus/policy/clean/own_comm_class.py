"""A student communicator class whose methods are called allreduce/broadcast: not a process group."""

import torch
import torch.distributed as dist


class RingCommunicator:
    def __init__(self):
        self.rank, self.size = dist.get_rank(), dist.get_world_size()

    def broadcast(self, tensor, src):
        if self.rank == src:
            for peer in range(self.size):
                if peer != src:
                    dist.send(tensor, peer)
        else:
            dist.recv(tensor, src)
        return tensor

    def allreduce(self, tensor):
        total = tensor.clone()
        for peer in range(self.size):
            if peer != self.rank:
                other = torch.empty_like(tensor)
                request = dist.isend(tensor.contiguous(), peer)
                dist.recv(other, peer)
                request.wait()
                total += other
        tensor.copy_(total)
        return tensor


def _reduce_with(comm, tensor):
    return comm.allreduce(tensor)


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    return _reduce_with(RingCommunicator(), tensor)


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    comm = RingCommunicator()
    return comm.broadcast(tensor, src)


def my_allgather(tensor): raise NotImplementedError
def my_reduce_scatter(tensor): raise NotImplementedError
def my_all_to_all(tensor, scatter_dim, gather_dim): raise NotImplementedError
