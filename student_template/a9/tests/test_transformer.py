import pytest
import torch
from src.transformer import BasicTransformerBlock, TransformerConfig

from tests.utils import run_distributed, world_size_params

ATOL = 1e-5
BATCH = 2


def _model_and_input(world_size):
    """The same block and input on every rank (fixed seed), sized so heads and sequence divide."""
    config, seq_len = TransformerConfig(), 8
    if config.n_heads % world_size or seq_len % world_size:
        config = TransformerConfig(d_model=8 * world_size, n_heads=world_size, dim_ff=16 * world_size)
        seq_len = 2 * world_size
    torch.manual_seed(0)
    block = BasicTransformerBlock(config).eval()
    x = torch.randn(BATCH, seq_len, config.d_model)
    return block, x


def _assert_close(actual, expected, what):
    # Not torch.testing.assert_close: its first call costs each freshly forked rank about a second.
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    error = (actual - expected).abs().max().item()
    assert error <= ATOL, f"{what}: max abs difference from forward() is {error:.2e} > {ATOL}"


def _shards_worker(rank, world_size):
    block, _ = _model_and_input(world_size)
    block.init_tensor_parallel_shards()
    d, f = block.config.d_model, block.config.dim_ff
    rows_d = slice(rank * d // world_size, (rank + 1) * d // world_size)
    rows_f = slice(rank * f // world_size, (rank + 1) * f // world_size)
    expected = {
        "q_proj_shard": block.q_proj.weight[rows_d],
        "k_proj_shard": block.k_proj.weight[rows_d],
        "v_proj_shard": block.v_proj.weight[rows_d],
        "o_proj_shard": block.o_proj.weight[:, rows_d],
        "fc1_shard": block.fc1.weight[rows_f],
        "fc1_bias_shard": block.fc1.bias[rows_f],
        "fc2_shard": block.fc2.weight[:, rows_f],
    }
    for name, value in expected.items():
        shard = getattr(block, name)
        assert shard.shape == value.shape, f"{name}: shape {tuple(shard.shape)}, not {tuple(value.shape)}"
        assert torch.equal(shard, value), f"{name} holds the wrong part of the weight"


def _tensor_parallel_worker(rank, world_size):
    block, x = _model_and_input(world_size)
    with torch.no_grad():
        y_ref = block(x)
        block.init_tensor_parallel_shards()
        y_tp = block.forward_tensor_parallel(x)
    _assert_close(y_tp, y_ref, "forward_tensor_parallel")


def _ulysses_worker(rank, world_size):
    block, x = _model_and_input(world_size)
    tokens = slice(rank * x.shape[1] // world_size, (rank + 1) * x.shape[1] // world_size)
    with torch.no_grad():
        y_ref = block(x)
        y_shard = block.forward_ulysses(x[:, tokens].contiguous())
    _assert_close(y_shard, y_ref[:, tokens], f"forward_ulysses on rank {rank}")


@pytest.mark.parametrize("world_size", world_size_params())
def test_tensor_parallel_shards(world_size):
    run_distributed(world_size, _shards_worker)


@pytest.mark.parametrize("world_size", world_size_params())
def test_tensor_parallel(world_size):
    run_distributed(world_size, _tensor_parallel_worker)


@pytest.mark.parametrize("world_size", world_size_params())
def test_ulysses(world_size):
    run_distributed(world_size, _ulysses_worker)
