"""Task 1: collective operations built from point-to-point messages only.

Allowed inside these functions: ``dist.send``, ``dist.recv``, ``dist.isend``, ``dist.irecv``,
``dist.get_rank()``, ``dist.get_world_size()`` and ordinary CPU tensor operations.  Not allowed:
any built-in collective (``dist.broadcast``, ``dist.all_reduce``, ``dist.reduce``, ``dist.all_gather``,
``dist.gather``, ``dist.scatter``, ``dist.reduce_scatter``, ``dist.all_to_all``, ...) and no
``dist.barrier``.  The grader checks this both by reading the code and at run time.

Every function is collective: all ranks call it with tensors of the same shape and dtype, and it
returns only when this rank's part of the communication is complete.  Gloo's ``send``/``recv`` need
contiguous tensors.
"""

import torch
import torch.distributed as dist  # noqa: F401  (you will need it)


def my_broadcast(tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
    """Copy ``tensor`` from rank ``src`` into ``tensor`` on every rank, in place, and return it.

    On non-source ranks the argument only provides shape and dtype; its contents are overwritten.
    """
    raise NotImplementedError(
        "my_broadcast: implement with dist.send/dist.recv only (e.g. src sends to every other rank, "
        "or a binary tree); overwrite `tensor` in place on every rank and return it."
    )


def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks, in place, and return it (every rank ends with the same sum)."""
    raise NotImplementedError(
        "my_allreduce: implement a sum-allreduce with dist.send/dist.recv only (e.g. gather to rank 0, "
        "accumulate, then my_broadcast; a ring earns more); update `tensor` in place and return it."
    )


def my_allgather(tensor: torch.Tensor) -> torch.Tensor:
    """Return ``[tensor_0; tensor_1; ...]``: every rank's tensor concatenated along dim 0 in rank order.

    Input ``[N, ...]`` on every rank, output ``[world_size * N, ...]``.
    """
    raise NotImplementedError(
        "my_allgather: implement with dist.send/dist.recv only; return a new tensor holding all ranks' "
        "inputs concatenated along dim 0 in rank order."
    )


def my_reduce_scatter(tensor: torch.Tensor) -> torch.Tensor:
    """Return on rank ``r`` the element-wise sum over all ranks of chunk ``r`` of ``tensor``.

    The input ``[world_size * N, ...]`` is split into ``world_size`` equal chunks along dim 0;
    the output has shape ``[N, ...]``.
    """
    raise NotImplementedError(
        "my_reduce_scatter: implement with dist.send/dist.recv only; split dim 0 into world_size chunks, "
        "rank r returns the sum over ranks of chunk r (use a consistent send/recv order to avoid deadlock)."
    )


def my_all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """Split ``tensor`` along ``scatter_dim``, send chunk ``i`` to rank ``i``, and return the chunks
    received from ranks ``0..world_size-1`` concatenated along ``gather_dim`` in rank order.

    ``scatter_dim`` shrinks by ``world_size`` and ``gather_dim`` grows by it; when they are equal the
    shape is unchanged.  Negative dims count from the end.
    """
    raise NotImplementedError(
        "my_all_to_all: implement with dist.isend/dist.irecv (non-blocking, to avoid deadlock); copy your "
        "own chunk locally, send chunk i to rank i and concatenate received chunks along gather_dim."
    )
