"""Rank side of HW12: the trusted ``DistributedContext`` a rank gets when it must hold only its own data.

The student's code sees the handout's interface (``all_gather(tensor, rank, group_id)``,
``all_reduce(tensor, rank, group_id, op)`` with ops ``'sum'`` and ``'mean'``, ``barrier.wait()``,
``world_size``): the assignment's API, so this module is the pack's, not the threads runtime's
(which runs threads and says what hung).  Behind that interface every
rank is its own process and a collective is a torch.distributed collective between them, which the
session measures on the wire like any other (the rubric's ``policy.allow`` names them).  Nothing of
another rank is in this process: its shard, its rows and its inputs stay in its own heap.

A ``rank`` argument that is not this process's rank is the student's error (a thread would have
written into another rank's slot of the shared buffer), said at once.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


class _Barrier:
    """``threading.Barrier``'s ``wait`` across processes."""

    def wait(self, timeout: float | None = None) -> int:
        dist.barrier()
        return dist.get_rank()


class TrustedContext:
    """The handout's DistributedContext interface, one process per rank."""

    def __init__(self, world_size: int) -> None:
        if world_size != dist.get_world_size():
            raise ValueError(f"DistributedContext({world_size}) in a world of {dist.get_world_size()} ranks")
        self.world_size = world_size
        self.barrier = _Barrier()

    def all_gather(self, tensor: Any, rank: int, group_id: str) -> list[torch.Tensor]:
        t = self._own(tensor, rank, "all_gather")
        gathered = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(gathered, t)
        return gathered

    def all_reduce(self, tensor: Any, rank: int, group_id: str, op: str) -> torch.Tensor:
        t = self._own(tensor, rank, "all_reduce").clone()
        if op not in ("sum", "mean"):
            raise ValueError(f"all_reduce op {op!r}: the handout's context has 'sum' and 'mean'")
        dist.all_reduce(t)
        return t / self.world_size if op == "mean" else t

    @staticmethod
    def _own(tensor: Any, rank: int, what: str) -> torch.Tensor:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{what} takes a torch.Tensor, got {type(tensor).__name__}")
        if rank != dist.get_rank():
            raise ValueError(f"{what} called with rank={rank!r} on rank {dist.get_rank()}")
        return tensor.detach().contiguous()
