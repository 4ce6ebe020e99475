import pytest
import torch
from src.collectives import my_allreduce

from tests.utils import run_distributed, world_size_params

CASES = ((torch.float32, (7,)), (torch.float64, (3, 4)), (torch.int64, (7,)), (torch.bfloat16, (3, 4)))


def _rank_input(rank, shape, dtype):
    # Small integers: every dtype (bfloat16 included) sums them exactly, in any order.
    return (torch.arange(torch.Size(shape).numel()).reshape(shape) % 5 + rank).to(dtype)


def _allreduce_worker(rank, world_size):
    for dtype, shape in CASES:
        expected = sum(_rank_input(r, shape, dtype) for r in range(world_size))
        y = my_allreduce(_rank_input(rank, shape, dtype))
        assert torch.equal(y, expected), f"{dtype} {shape}: got {y}, expected {expected}"


def _allreduce_inplace_worker(rank, world_size):
    x = _rank_input(rank, (4, 3), torch.float32)
    expected = sum(_rank_input(r, (4, 3), torch.float32) for r in range(world_size))
    y = my_allreduce(x)
    assert torch.equal(x, expected), "the argument must hold the sum afterwards (in place)"
    assert torch.equal(y, expected), "the returned tensor must hold the sum"


@pytest.mark.parametrize("world_size", world_size_params())
def test_allreduce(world_size):
    run_distributed(world_size, _allreduce_worker)


@pytest.mark.parametrize("world_size", world_size_params())
def test_allreduce_inplace(world_size):
    run_distributed(world_size, _allreduce_inplace_worker)
