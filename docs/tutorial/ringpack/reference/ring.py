"""The tutorial pack's reference solution: a ring all-reduce in three functions, send/recv only."""

import torch
import torch.distributed as dist


def ring_send_right(x: torch.Tensor) -> torch.Tensor:
    """Send ``x`` to the right neighbour and return what the left one sent.  The send is posted first
    (``isend``), so that no two neighbours wait on each other's blocking call."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(x)
    sent = dist.isend(x.contiguous(), (rank + 1) % world_size)
    dist.recv(received, (rank - 1) % world_size)
    if sent is not None:  # None only on a rank outside the group
        sent.wait()
    return received


def ring_reduce_scatter(x: torch.Tensor) -> torch.Tensor:
    """N - 1 steps: at step s a rank passes its running sum of chunk (rank - s - 1) to the right and
    adds its own part to the one it received; after the last step it holds the sum of chunk ``rank``."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunks = x.chunk(world_size)
    partial = chunks[(rank - 1) % world_size].clone()
    for step in range(1, world_size):
        partial = ring_send_right(partial) + chunks[(rank - step - 1) % world_size]
    return partial


def ring_all_gather(chunk: torch.Tensor) -> torch.Tensor:
    """N - 1 steps: each rank passes on the chunk it received last, and files it under its owner."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    gathered = [chunk] * world_size
    for step in range(1, world_size):
        gathered[(rank - step) % world_size] = ring_send_right(gathered[(rank - step + 1) % world_size])
    return torch.cat(gathered)
