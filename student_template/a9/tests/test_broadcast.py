import pytest
import torch
from src.collectives import my_broadcast

from tests.utils import run_distributed, world_size_params

DTYPES = (torch.float32, torch.int64, torch.bfloat16)


def _broadcast_worker(rank, world_size):
    for src in sorted({0, world_size - 1}):
        for dtype in DTYPES:
            source = (torch.arange(20).reshape(4, 5) + 7 * src).to(dtype)
            x = source.clone() if rank == src else torch.full_like(source, -1)
            y = my_broadcast(x, src=src)
            case = f"src={src} {dtype}"
            assert torch.equal(x, source), f"{case}: the argument must hold src's data afterwards (in place)"
            assert torch.equal(y, source), f"{case}: the returned tensor must hold src's data"


@pytest.mark.parametrize("world_size", world_size_params())
def test_broadcast(world_size):
    run_distributed(world_size, _broadcast_worker)
