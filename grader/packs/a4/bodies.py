"""Rank side of Assignment 4: the only module of this pack a rank imports.

The student's ``assignment4.py`` is never imported: its module level initialises NCCL on GPUs and
runs all four parts.  Each case reads the source, executes only its imports (but ``utils``) and its
top-level ``def`` and ``class`` statements, with the grader's own versions of what the handout gives
and of the globals the script defines: ``init_distributed``, ``create_batch``, ``check``,
``compare_tensors``, ``rank``, ``world_size``, ``global_batch_size``, ``local_batch_size``,
``input_dim``, ``output_dim``.  The handout's functions are then called on CPU.

``create_batch`` serves the batch the session sent for the case, whatever seed it is called with:
the rank is never given what the batch is made from (the grading's salt), and in the
data-parallel cases every row outside the rank's own slice is NaN, so a rank that computes on
rows that are not its own (the whole batch, the wrong slice, or data it made itself from the
seed) ends with NaN or a wrong weight.  ``rank``, ``local_rank`` and ``world_size`` are what
torchrun tells the rank on the case's layout (``LOCAL_RANK`` is 0 on every rank of the handout's
4 nodes).
"""

from __future__ import annotations

import ast
import difflib
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.distributed import ReduceOp

from grader.handin import script
from grader.packs.a4.handout import GLOBAL_BATCH, HANDOUT_SEED, INPUT_DIM, OUTPUT_DIM

SCRIPT = "assignment4.py"
Tensors = dict[str, torch.Tensor]


def check(tensor: Any, expected_shape: Any) -> None:
    """The handout's ``check``: the shape guard every part calls (a wildcard is a size <= 0)."""
    if tensor is None:
        return
    assert isinstance(tensor, torch.Tensor), "SHAPE GUARD: Provided tensor is not a torch.Tensor!"
    actual_shape = list(tensor.detach().shape)
    assert isinstance(expected_shape, list | tuple), "SHAPE GUARD: expected_shape must be a list or tuple!"
    assert len(expected_shape) == len(actual_shape), (
        f"SHAPE GUARD: Expected shape length {len(expected_shape)} but got {len(actual_shape)} "
        f"with shape {actual_shape}."
    )
    for idx, (actual_dim, expected_dim) in enumerate(zip(actual_shape, expected_shape, strict=True)):
        if expected_dim > 0:
            assert actual_dim == expected_dim, (
                f"SHAPE GUARD: At dimension {idx}: expected {expected_dim}, but got {actual_dim} "
                f"(actual shape: {actual_shape})."
            )


def compare_tensors(tensor1: torch.Tensor, tensor2: torch.Tensor, tol: float = 1e-5, prefix: str = "") -> None:
    """The handout's comparison print; the grader compares on its own, in the session."""
    is_close = torch.allclose(tensor1, tensor2, rtol=tol, atol=tol)
    print(f"[{prefix}][Rank {dist.get_rank()}] Tensors match: {is_close}", flush=True)


def _create_batch(served: Tensors) -> Any:
    def create_batch(
        batch_size: int, input_dim: int, output_dim: int, seed: int = HANDOUT_SEED, device: str = "cuda"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The handout's ``create_batch`` on CPU: the case's batch, as the session sent it (see the module)."""
        torch.manual_seed(seed)  # the handout's version leaves the generator there; code after it may draw
        inputs, targets = served["inputs"], served["targets"]
        if (batch_size, input_dim, output_dim) != (inputs.shape[0], inputs.shape[1], targets.shape[1]):
            raise ValueError(
                f"create_batch({batch_size}, {input_dim}, {output_dim}): the handout's batch is "
                f"create_batch(global_batch_size, input_dim, output_dim), {GLOBAL_BATCH} x {INPUT_DIM} -> {OUTPUT_DIM}"
            )
        return inputs.clone(), targets.clone()

    return create_batch


def _local_rank() -> int:
    """``LOCAL_RANK`` as torchrun set it for the case's layout (``grader.runtimes.torchdist.torchrun_env``)."""
    return int(os.environ.get("LOCAL_RANK", dist.get_rank()))


def _init_distributed() -> tuple[int, int, int]:
    """The handout's ``init_distributed``: the group is already up (Gloo, CPU); nothing to start."""
    return dist.get_rank(), _local_rank(), dist.get_world_size()


def definitions(student: Any, served: Tensors | None = None) -> dict[str, Any]:
    """The script's definitions, executed in a namespace of the grader's helpers and globals."""
    path = Path(student.sandbox) / SCRIPT
    rank, world_size = dist.get_rank(), dist.get_world_size()
    given = {
        "torch": torch,
        "nn": nn,
        "optim": optim,
        "dist": dist,
        "ReduceOp": ReduceOp,
        "init_distributed": _init_distributed,
        "create_batch": _create_batch(served or {}),
        "check": check,
        "compare_tensors": compare_tensors,
        "rank": rank,
        "local_rank": _local_rank(),
        "world_size": world_size,
        "global_batch_size": GLOBAL_BATCH,
        "local_batch_size": GLOBAL_BATCH // world_size,
        "input_dim": INPUT_DIM,
        "output_dim": OUTPUT_DIM,
        "seed": HANDOUT_SEED,
    }
    namespace: dict[str, Any] = {"__name__": "assignment4", "__file__": str(path), **given}
    script.read(path).execute(
        namespace, keep=lambda node: not (isinstance(node, ast.ImportFrom) and node.module == "utils")
    )
    namespace.update(given)  # the grader's helpers and globals win over anything the script defines
    return namespace


def named(namespace: dict[str, Any], name: str) -> Any:
    """The definition the handout names, or a NotImplementedError that says what is there instead."""
    if name in namespace:
        return namespace[name]
    defined = [k for k, v in namespace.items() if callable(v) and getattr(v, "__module__", "") == "assignment4"]
    close = difflib.get_close_matches(name, defined, n=1)
    hint = f"; did you rename it to {close[0]}?" if close else ""
    raise NotImplementedError(f"{SCRIPT} defines no {name}, the name the handout gives it{hint}")


def _updated(out: Any, what: str) -> Tensors:
    if isinstance(out, tuple) and out:  # single_step returns (initial_weight, updated_weight)
        out = out[-1]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{what} returned {type(out).__name__}, expected the updated weight (a torch.Tensor)")
    return {"out": out.detach().float()}


def _seed(t: Tensors) -> int:
    return int(t["seed"].item())


def _step(function: str) -> Any:
    def body(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
        fn = named(definitions(student, t), function)
        kwargs: dict[str, Any] = {"seed": _seed(t), "device": "cpu"}
        if "steps" in params:
            kwargs["accumulation_steps"] = params["steps"]
        with torch.enable_grad():  # the runtime calls bodies under no_grad
            return _updated(fn(**kwargs), function)

    return body


def _autograd(function: str) -> Any:
    """Forward and backward of the handout's autograd function on this rank's tensor and gradient."""

    def body(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
        fn = named(definitions(student), function)
        x = t["x"].clone().requires_grad_(True)
        with torch.enable_grad():
            y = fn.apply(x)
            y.backward(t["g"])
        if x.grad is None:
            raise TypeError(f"{function}.backward gave no gradient for its input")
        return {"out": y.detach(), "grad": x.grad}

    return body


def _column_layer(student: Any, t: Tensors) -> Any:
    layer = named(definitions(student), "FullColumnParallelLinear")
    return layer(t["w"].clone(), dist.get_world_size(), dist.get_rank())


def _column_shard(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    weight = getattr(_column_layer(student, t), "W", None)
    if not isinstance(weight, torch.Tensor):
        raise TypeError("FullColumnParallelLinear keeps no tensor W, the attribute the handout names")
    return {"out": weight.detach()}


def _column_output(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    layer = _column_layer(student, t)
    with torch.enable_grad():
        out = layer(t["x"].clone())
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"FullColumnParallelLinear.forward returned {type(out).__name__}, expected a torch.Tensor")
    return {"out": out.detach()}


def _column_input_grad(student: Any, params: dict[str, Any], t: Tensors) -> Tensors:
    """The layer's backward to its input: ``BroadcastParallel`` collects the input's gradient from
    every rank ("collect the errors from all ranks in the backward pass")."""
    layer = _column_layer(student, t)
    x = t["x"].clone().requires_grad_(True)
    with torch.enable_grad():
        out = layer(x)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            raise TypeError("FullColumnParallelLinear.forward returned no output that autograd can go back through")
        out.backward(t["g"])
    if x.grad is None:
        raise TypeError("FullColumnParallelLinear.forward gave its input no gradient")
    return {"grad": x.grad}


BODIES = {
    "single_step": _step("single_step"),
    "grad_accumulation": _step("single_step_with_grad_accumulation"),
    "data_parallel": _step("data_parallel_single_step"),
    "broadcast_parallel": _autograd("BroadcastParallel"),
    "gather_parallel": _autograd("GatherParallel"),
    "column_shard": _column_shard,
    "column_output": _column_output,
    "column_input_grad": _column_input_grad,
    "column_step": _step("full_column_parallel_single_step"),
}


def _warm_up() -> None:
    """The first optimizer step imports most of the rest of torch (about 800 modules, 0.7 s of CPU).
    Taken here, at import, it happens once in the zygote instead of in every rank of every group."""
    weight = nn.Parameter(torch.zeros(2, 2))
    optimizer = optim.SGD([weight], lr=0.5)
    optimizer.zero_grad()
    weight.sum().backward()
    optimizer.step()


_warm_up()
