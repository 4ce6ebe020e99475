import pytest
import torch
from src.collectives import my_all_to_all

from tests.utils import run_distributed, world_size_params

# (scatter_dim, gather_dim): Ulysses' forward exchange, its reverse, same dim, negative dims.
DIMS = ((2, 1), (1, 2), (1, 1), (-2, -3))


def _rank_input(rank, world_size):
    # [batch, seq, heads, head_dim] with seq and heads divisible by any world size.
    shape = (2, 2 * world_size, 2 * world_size, 3)
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) + 1000 * rank


def _all_to_all_worker(rank, world_size):
    for scatter_dim, gather_dim in DIMS:
        case = f"scatter_dim={scatter_dim}, gather_dim={gather_dim}"
        x = _rank_input(rank, world_size)
        y = my_all_to_all(x, scatter_dim, gather_dim)
        sent_to_me = [_rank_input(r, world_size).chunk(world_size, scatter_dim)[rank] for r in range(world_size)]
        expected = torch.cat(sent_to_me, dim=gather_dim)
        assert y.shape == expected.shape, f"{case}: shape {tuple(y.shape)}, expected {tuple(expected.shape)}"
        assert torch.equal(y, expected), f"{case}: chunk i of the output along gather_dim must come from rank i"
        assert torch.equal(x, _rank_input(rank, world_size)), f"{case}: my_all_to_all must not modify its input"


@pytest.mark.parametrize("world_size", world_size_params())
def test_all_to_all(world_size):
    run_distributed(world_size, _all_to_all_worker)
