"""Bring up the default process group the way ``torchrun`` expects (CPU, Gloo)."""

import os

import torch.distributed as dist


def init_process_group(backend: str = "gloo") -> tuple[int, int]:
    """Join the process group described by the environment and return ``(rank, world_size)``.

    ``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` for every process;
    the ``env://`` rendezvous reads the last two.  Calling this twice is harmless, so helper scripts
    may call it unconditionally.
    """
    if not dist.is_initialized():
        dist.init_process_group(
            backend=backend,
            init_method="env://",
            rank=int(os.environ["RANK"]),
            world_size=int(os.environ["WORLD_SIZE"]),
        )
    return dist.get_rank(), dist.get_world_size()
