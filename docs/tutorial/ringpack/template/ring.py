"""Ring collectives: the handout's three functions.  Use only dist.send, dist.recv, dist.isend and
dist.irecv (no collective of torch.distributed)."""

import torch
import torch.distributed as dist  # noqa: F401  (yours to use)


def ring_send_right(x: torch.Tensor) -> torch.Tensor:
    """Send x to rank (rank + 1) % world_size; return what rank (rank - 1) % world_size sent."""
    raise NotImplementedError("ring_send_right")


def ring_reduce_scatter(x: torch.Tensor) -> torch.Tensor:
    """Return chunk number `rank` of the elementwise sum of every rank's x."""
    raise NotImplementedError("ring_reduce_scatter")


def ring_all_gather(chunk: torch.Tensor) -> torch.Tensor:
    """Return every rank's chunk, concatenated in rank order."""
    raise NotImplementedError("ring_all_gather")
