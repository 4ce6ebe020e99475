"""Run a test function on several ranks of a real Gloo process group, on one machine.

Each call gets its own rendezvous file (no TCP port to collide with another run), and a deadlock
becomes a test failure after ``JOIN_TIMEOUT_S`` instead of a hung ``pytest``.
"""

import os
import shutil
import tempfile
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.multiprocessing import ProcessRaisedException

JOIN_TIMEOUT_S = 60.0

#: World sizes the tests run; e.g. ``A9_WORLD_SIZES=1,2,3,4,5,6,7,8 pytest`` for a wider sweep.
WORLD_SIZES = tuple(int(w) for w in os.environ.get("A9_WORLD_SIZES", "1,2,4").split(",") if w.strip())

# fork starts ranks in ~0.1 s because torch is already imported; spawn (re-importing torch per rank)
# is the fallback only where fork does not exist.
_START_METHOD = "fork" if "fork" in mp.get_all_start_methods() else "spawn"


class RankFailed(Exception):
    """A rank raised; the message starts with that rank's exception and carries its traceback."""


def world_size_params():
    """``WORLD_SIZES`` as pytest parameters with readable ids (``ws4``)."""
    return [pytest.param(ws, id=f"ws{ws}") for ws in WORLD_SIZES]


def _rank_main(rank, world_size, store_path, fn, args):
    torch.set_num_threads(1)  # ranks share the machine's cores
    store = dist.FileStore(store_path, world_size)
    store.set_timeout(timedelta(seconds=JOIN_TIMEOUT_S))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size, timeout=store.timeout)
    # A rank that returned early and exited would close its sockets under a peer that is still
    # connecting to it ("Connection closed by peer"); so every rank first waits for all to connect.
    store.set(f"connected/{rank}", "1")
    store.wait([f"connected/{r}" for r in range(world_size)])
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_distributed(world_size, fn, *args):
    """Call ``fn(rank, world_size, *args)`` on ``world_size`` ranks; raise if any rank fails or hangs.

    A rank's exception (e.g. an ``AssertionError`` or ``NotImplementedError``) fails the calling test
    with that rank's traceback.
    """
    store_dir = tempfile.mkdtemp(prefix="a9-store-")
    try:
        context = mp.start_processes(
            _rank_main,
            args=(world_size, os.path.join(store_dir, "store"), fn, args),
            nprocs=world_size,
            join=False,
            start_method=_START_METHOD,
        )
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        try:
            while not context.join(timeout=max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    _kill_and_raise_timeout(context.processes)
        except ProcessRaisedException as failure:
            error = failure.msg.strip().splitlines()[-1]
            raise RankFailed(f"rank {failure.error_index}: {error}\n{failure.msg}") from None
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


def _kill_and_raise_timeout(processes):
    stuck = [rank for rank, process in enumerate(processes) if process.is_alive()]
    for process in processes:
        if process.is_alive():
            process.kill()
        process.join()
    raise TimeoutError(
        f"ranks {stuck} of {len(processes)} did not finish within {JOIN_TIMEOUT_S:.0f} s: "
        "a recv without a matching send, or ranks sending to each other with blocking send?"
    )
