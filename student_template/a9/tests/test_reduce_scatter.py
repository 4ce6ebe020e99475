import pytest
import torch
from src.collectives import my_reduce_scatter

from tests.utils import run_distributed, world_size_params

DTYPES = (torch.float32, torch.int64)


def _rank_input(rank, world_size, dtype):
    return (torch.arange(world_size * 2 * 3).reshape(world_size * 2, 3) % 7 + rank).to(dtype)


def _reduce_scatter_worker(rank, world_size):
    for dtype in DTYPES:
        total = sum(_rank_input(r, world_size, dtype) for r in range(world_size))
        expected = total.chunk(world_size)[rank]
        y = my_reduce_scatter(_rank_input(rank, world_size, dtype))
        assert torch.equal(y, expected), f"{dtype}: got {y}, expected chunk {rank} of the sum, {expected}"


@pytest.mark.parametrize("world_size", world_size_params())
def test_reduce_scatter(world_size):
    run_distributed(world_size, _reduce_scatter_worker)
