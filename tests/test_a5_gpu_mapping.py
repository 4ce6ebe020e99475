"""A5's snippets are written for GPUs: their CUDA code is mapped to the CPU by its meaning, never by
its text (issue 37).  Each spelling below is generated in variants (spacing, keyword order, aliases,
the device made in several ways) and run here, on a torch without CUDA, after the mapping: an
unmapped CUDA call raises "Torch not compiled with CUDA enabled", so every variant must map."""

from __future__ import annotations

import ast
import itertools

import pytest
import torch

from grader.packs.a5.snippets import parse_block
from grader.packs.a5.tree import CPU_DEVICE, cpu_device

#: How students make the device they move things to.
DEVICES = {
    "index": "device = local_rank",
    "string": 'device = "cuda"',
    "indexed string": 'device = f"cuda:{local_rank}"',
    "torch.device": 'device = torch.device("cuda", local_rank)',
    "torch.device kw": 'device = torch.device(type="cuda", index=local_rank)',
    "starter's": 'device = torch.device(f"cuda:{local_rank}")',
}
#: Moves to the GPU, each written as students write it; ``{sp}`` is the spacing around ``=`` and ``,``.
MOVES = (
    "y = x.cuda()",
    "y = x.cuda(non_blocking{sp}={sp}True)",
    "y = x.cuda(device{sp}={sp}local_rank,{sp}non_blocking{sp}={sp}True)",
    "y = x.cuda(non_blocking{sp}={sp}True,{sp}device{sp}={sp}local_rank)",
    "y = x.cuda(local_rank)",
    "y = x.to(device)",
    "y = x.to(device,{sp}non_blocking{sp}={sp}True)",
    "y = x.to(non_blocking{sp}={sp}True,{sp}device{sp}={sp}device)",
    "y = x.to(device{sp}={sp}device)",
    "y = x.to(device,{sp}torch.bfloat16)",
    'y = x.to("cuda")',
    "y = x.to(local_rank)",
    "y = x.to(torch.cuda.current_device() if False else local_rank)",
    "y = x.clone().detach().requires_grad_(True).cuda()",
    "y = torch.ones(2,{sp}device{sp}={sp}device) * x",
    "y = torch.ones_like(x,{sp}device{sp}={sp}device)",
    "y = torch.full((2,),{sp}1.0,{sp}requires_grad{sp}={sp}True,{sp}device{sp}={sp}device) * x",
)
#: Calls that only choose, seed or wait for a GPU, through every name of the module.
WAITS = (
    "torch.cuda.synchronize()",
    "torch.cuda.synchronize(device{sp}={sp}local_rank)",
    "T.cuda.synchronize()",
    "cuda.synchronize()",
    "torch.cuda.set_device(local_rank)",
    "torch.cuda.manual_seed_all(1234)",
    "torch.cuda.empty_cache()",
)
SPACINGS = ("", " ")


def run(source: str) -> dict[str, object]:
    statements, problem = parse_block(source)
    assert problem == "" and statements is not None, problem
    namespace: dict[str, object] = {
        "torch": torch,
        "T": torch,
        "cuda": torch.cuda,
        "x": torch.ones(2),
        "local_rank": 1,
        CPU_DEVICE: cpu_device,
    }
    exec(compile(ast.Module(statements, []), "<snippet>", "exec"), namespace)
    return namespace


def test_there_is_no_cuda_here_so_an_unmapped_call_would_fail() -> None:
    with pytest.raises((AssertionError, RuntimeError)):
        torch.ones(1).cuda()


@pytest.mark.parametrize(("device", "move", "sp"), list(itertools.product(DEVICES, MOVES, SPACINGS)))
def test_every_move_to_a_gpu_device_stays_on_the_cpu_with_its_value(device: str, move: str, sp: str) -> None:
    namespace = run(DEVICES[device] + "\n" + move.format(sp=sp) + "\n")
    moved = namespace["y"]
    assert isinstance(moved, torch.Tensor) and moved.device.type == "cpu"
    assert torch.equal(moved.detach().float(), torch.ones(2))


@pytest.mark.parametrize(("wait", "sp"), list(itertools.product(WAITS, SPACINGS)))
def test_every_wait_for_a_gpu_does_nothing(wait: str, sp: str) -> None:
    run(wait.format(sp=sp) + "\n")


@pytest.mark.parametrize("value", [torch.float32, torch.zeros(1), "cpu", torch.device("cpu"), None, True])
def test_what_is_no_cuda_device_is_passed_as_it_is(value: object) -> None:
    assert cpu_device(value) is value
