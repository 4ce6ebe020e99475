"""Rank side: the grader's known-good Task 1 collectives, for Task 2 runs whose student version failed.

A Task 1 defect is charged once, in Task 1: when any case of one of the student's collectives
failed, the session runs every Task 2 case with that function replaced by the one of the same name
here (``bodies.substituted``), so tensor parallelism, Ulysses and the design checks are judged on
the student's Task 2 code alone.  The rank's guard attributes messages sent from these functions to
the name they stand in for, so "communicates through your Task 1 functions" reads the same as with
the student's own.

Each is simple and deadlock-free for any call the student's Task 2 code can make: every rank posts
all its sends and receives non-blocking and then waits, chunks are ``tensor_split`` (so an uneven
split never leaves a rank waiting for a chunk nobody sends), and sums are taken in rank order on
every rank, so every rank gets the same bits.  Inputs may be non-contiguous; results are written
back in place where the handout says so.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _exchange(outgoing: list[torch.Tensor], incoming: list[torch.Tensor]) -> None:
    """Send ``outgoing[peer]`` to every other rank and receive ``incoming[peer]`` from it; empty
    chunks are skipped on both sides (both sides know the sizes)."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    works = []
    for peer in range(ws):
        if peer == rank:
            continue
        if outgoing[peer].numel():
            works.append(dist.isend(outgoing[peer], dst=peer))
        if incoming[peer].numel():
            works.append(dist.irecv(incoming[peer], src=peer))
    _wait(works)


def _wait(works: list[dist.Work | None]) -> None:
    for work in works:
        if work is not None:  # None only for a rank outside the group, which a case never has
            work.wait()


def _from_everyone(tensor: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's copy of ``tensor`` (same shape and dtype everywhere), in rank order."""
    rank, ws = dist.get_rank(), dist.get_world_size()
    mine = tensor.detach().contiguous()
    received = [mine if peer == rank else torch.empty_like(mine) for peer in range(ws)]
    _exchange([mine] * ws, received)
    return received


def _sum(tensors: list[torch.Tensor]) -> torch.Tensor:
    total = tensors[0].clone()
    for t in tensors[1:]:
        total += t
    return total


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    rank, ws = dist.get_rank(), dist.get_world_size()
    data = tensor.detach().contiguous()
    if rank == src:
        works = [dist.isend(data, dst=peer) for peer in range(ws) if peer != src]
    else:
        works = [dist.irecv(data, src=src)]
    _wait(works)
    if data.data_ptr() != tensor.data_ptr():
        tensor.detach().copy_(data)
    return tensor


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    tensor.detach().copy_(_sum(_from_everyone(tensor)))
    return tensor


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    return torch.cat(_from_everyone(tensor), dim=0)


def my_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    rank, ws = dist.get_rank(), dist.get_world_size()
    chunks = [c.contiguous() for c in tensor.detach().tensor_split(ws, dim=0)]
    received = [chunks[rank] if peer == rank else torch.empty_like(chunks[rank]) for peer in range(ws)]
    _exchange(chunks, received)
    return _sum(received)


def my_all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    rank, ws = dist.get_rank(), dist.get_world_size()
    chunks = [c.contiguous() for c in tensor.detach().tensor_split(ws, dim=scatter_dim)]
    received = [chunks[rank] if peer == rank else torch.empty_like(chunks[rank]) for peer in range(ws)]
    _exchange(chunks, received)
    return torch.cat(received, dim=gather_dim)


#: name -> the known-good function that stands in for the student's
COLLECTIVES = {fn.__name__: fn for fn in (my_broadcast, my_allreduce, my_allgather, my_reduce_scatter, my_all_to_all)}
