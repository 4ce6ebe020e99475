"""The grader's known-good Task 1 collectives (``grader.packs.a9.trusted``), run on real Gloo ranks.

They stand in for a student's failed function in every Task 2 case, so they must be right and must
never hang on any call a student's Task 2 code can make: uneven splits included (``torch.chunk``
would hand some rank nothing to send and leave its peer waiting), and non-contiguous arguments.
"""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from grader.packs.a9 import trusted

WORLD = 3


def rank_input(rank: int, shape: tuple[int, ...]) -> torch.Tensor:
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape) * (rank + 1)


def checks(rank: int) -> None:
    everyone = [rank_input(r, (5, 4)) for r in range(WORLD)]
    x = rank_input(rank, (5, 4))
    # all-to-all with an uneven split (5 rows over 3 ranks: 2, 2, 1), then along a non-contiguous dim
    got = trusted.my_all_to_all(x, scatter_dim=0, gather_dim=1)
    assert torch.equal(got, torch.cat([t.tensor_split(WORLD, 0)[rank] for t in everyone], dim=1))
    got = trusted.my_all_to_all(x.t(), scatter_dim=0, gather_dim=0)
    assert torch.equal(got, torch.cat([t.t().tensor_split(WORLD, 0)[rank] for t in everyone], dim=0))
    # reduce-scatter with an uneven split; a split with empty chunks (2 rows over 3 ranks)
    assert torch.equal(trusted.my_reduce_scatter(x), sum(everyone).tensor_split(WORLD, 0)[rank])
    two = rank_input(rank, (2, 3))
    want = sum(rank_input(r, (2, 3)) for r in range(WORLD)).tensor_split(WORLD, 0)[rank]
    assert torch.equal(trusted.my_reduce_scatter(two), want)
    got = trusted.my_all_to_all(two, scatter_dim=0, gather_dim=1)  # torch.chunk would make only 2 chunks
    assert torch.equal(got, torch.cat([rank_input(r, (2, 3)).tensor_split(WORLD, 0)[rank] for r in range(WORLD)], 1))
    # allreduce and broadcast in place, on a non-contiguous view
    y = rank_input(rank, (4, 5)).t()
    assert trusted.my_allreduce(y) is y and torch.equal(y, sum(rank_input(r, (4, 5)) for r in range(WORLD)).t())
    z = rank_input(rank, (4, 5)).t()
    assert trusted.my_broadcast(z, src=2) is z and torch.equal(z, rank_input(2, (4, 5)).t())
    assert torch.equal(trusted.my_allgather(x), torch.cat(everyone, dim=0))


def rank_main(rank: int, store: str, errors: multiprocessing.Queue) -> None:
    try:
        dist.init_process_group("gloo", store=dist.FileStore(store, WORLD), rank=rank, world_size=WORLD)
        checks(rank)
        dist.barrier()  # the test's own sync, never a student's
        dist.destroy_process_group()
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")


def test_known_good_collectives_are_right_on_uneven_and_non_contiguous_inputs(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    errors: multiprocessing.Queue = ctx.Queue()
    ranks = [ctx.Process(target=rank_main, args=(r, str(tmp_path / "store"), errors)) for r in range(WORLD)]
    for proc in ranks:
        proc.start()
    for proc in ranks:
        proc.join(timeout=60)
    hung = [proc for proc in ranks if proc.is_alive()]
    for proc in hung:
        proc.kill()
    assert not hung, "a known-good collective hung"
    failures = [errors.get() for _ in range(errors.qsize())]
    assert failures == []
    assert [proc.exitcode for proc in ranks] == [0] * WORLD


@pytest.mark.parametrize("name", sorted(trusted.COLLECTIVES))
def test_each_stands_in_under_the_name_of_the_function_it_replaces(name: str) -> None:
    assert trusted.COLLECTIVES[name].__name__ == name
