import pytest
import torch
from src.collectives import my_allgather

from tests.utils import run_distributed, world_size_params

CASES = ((torch.float32, (2, 3)), (torch.int64, (1,)), (torch.bfloat16, (3, 2, 2)))


def _rank_input(rank, shape, dtype):
    return (torch.arange(torch.Size(shape).numel()).reshape(shape) + 100 * rank).to(dtype)


def _allgather_worker(rank, world_size):
    for dtype, shape in CASES:
        x = _rank_input(rank, shape, dtype)
        y = my_allgather(x)
        expected = torch.cat([_rank_input(r, shape, dtype) for r in range(world_size)])
        assert torch.equal(y, expected), f"{dtype} {shape}: got {y}, expected {expected}"
        assert torch.equal(x, _rank_input(rank, shape, dtype)), "my_allgather must not modify its input"


@pytest.mark.parametrize("world_size", world_size_params())
def test_allgather(world_size):
    run_distributed(world_size, _allgather_worker)
