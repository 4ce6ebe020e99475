"""Rank side: the body of every Assignment 9 case.

A body receives this rank's input tensors (made by the runner) and the student's modules, calls
the student function under test and returns named tensors for the runner to compare.  Bodies do
no checking: the verdict is the runner's (``verdicts.py``), made from values it computed itself.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.distributed as dist

Tensors = dict[str, torch.Tensor]
#: The attributes the handout names for ``init_tensor_parallel_shards`` (see reference_model.shards).
SHARD_NAMES = (
    "q_proj_shard",
    "k_proj_shard",
    "v_proj_shard",
    "o_proj_shard",
    "fc1_shard",
    "fc1_bias_shard",
    "fc2_shard",
)


class BadReturn(Exception):
    """The student function returned something that is not what the handout promises."""


class Student(Protocol):
    def module(self, name: str) -> Any: ...


def _tensor(value: Any, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise BadReturn(f"{what} returned {type(value).__name__}, expected a torch.Tensor")
    return value


def _logical(x: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Undo the wire layout: a 'transposed' input becomes a non-contiguous view, as the case wants."""
    if params.get("layout") == "transposed":
        return x.transpose(-1, -2)
    return x


def _collective(name: str) -> Callable[[Student, dict[str, Any], Tensors], Tensors]:
    def body(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
        fn = getattr(student.module("src.collectives"), name)
        x = _logical(t["x"], params)
        if name == "my_broadcast":
            out = fn(x, src=params["src"])
        elif name == "my_all_to_all":
            out = fn(x, params["scatter_dim"], params["gather_dim"])
        else:
            out = fn(x)
        return {"out": _tensor(out, name)}

    return body


def _argument_after(name: str) -> Callable[[Student, dict[str, Any], Tensors], Tensors]:
    """Return the argument itself after the call: in-place updates and untouched inputs."""
    run = _collective(name)

    def body(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
        arg = t["x"]
        run(student, params, {"x": arg})
        return {"arg": arg}

    return body


def _block(student: Student, params: dict[str, Any], t: Tensors) -> Any:
    mod = student.module("src.transformer")
    config = mod.TransformerConfig(
        d_model=params["d_model"], n_heads=params["n_heads"], dim_ff=2 * params["d_model"], dropout_p=0.0
    )
    block = mod.BasicTransformerBlock(config)
    block.load_state_dict({k: v for k, v in t.items() if k != "x"}, strict=True)
    return block.eval()


def _tensor_parallel(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    block = _block(student, params, t)
    block.init_tensor_parallel_shards()
    return {"out": _tensor(block.forward_tensor_parallel(t["x"]), "forward_tensor_parallel")}


def _tensor_parallel_nan(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    """The forward must use the shards: the full weights are poisoned after sharding."""
    block = _block(student, params, t)
    block.init_tensor_parallel_shards()
    for name in ("q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"):
        getattr(block, name).weight.data.fill_(float("nan"))
    return {"out": _tensor(block.forward_tensor_parallel(t["x"]), "forward_tensor_parallel")}


def _tensor_parallel_shards(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    block = _block(student, params, t)
    block.init_tensor_parallel_shards()
    out = {}
    for name in SHARD_NAMES:
        value = getattr(block, name, None)
        if isinstance(value, torch.nn.Linear):  # a sharded Linear is a fair reading of "shard"
            value = value.weight
        out[name] = _tensor(value, f"init_tensor_parallel_shards (attribute {name})").detach()
    return out


def trusted_all_to_all(tensor: torch.Tensor, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    """A known-good all-to-all, so Ulysses can be judged apart from the student's Task 1."""
    ws, rank = dist.get_world_size(), dist.get_rank()
    chunks = [c.contiguous() for c in tensor.chunk(ws, dim=scatter_dim)]
    received = [torch.empty_like(chunks[rank]) for _ in range(ws)]
    received[rank] = chunks[rank]
    works = []
    for peer in range(ws):
        if peer != rank:
            works.append(dist.isend(chunks[peer], dst=peer))
            works.append(dist.irecv(received[peer], src=peer))
    for work in works:
        if work is not None:  # None only for a rank outside the group, which a case never has
            work.wait()
    return torch.cat(received, dim=gather_dim)


def _ulysses(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    block = _block(student, params, t)
    if not params.get("trusted_all_to_all"):
        return {"out": _tensor(block.forward_ulysses(t["x"]), "forward_ulysses")}
    # src.collectives is in sys.modules by now: the student's, or the placeholder of a broken one
    modules = [student.module("src.transformer"), sys.modules["src.collectives"]]
    saved = [getattr(m, "my_all_to_all", None) for m in modules]
    for m in modules:
        m.my_all_to_all = trusted_all_to_all
    try:
        return {"out": _tensor(block.forward_ulysses(t["x"]), "forward_ulysses")}
    finally:
        for m, fn in zip(modules, saved, strict=True):
            m.my_all_to_all = fn


BODIES: dict[str, Callable[[Student, dict[str, Any], Tensors], Tensors]] = {
    "broadcast": _collective("my_broadcast"),
    "allreduce": _collective("my_allreduce"),
    "allgather": _collective("my_allgather"),
    "reduce_scatter": _collective("my_reduce_scatter"),
    "all_to_all": _collective("my_all_to_all"),
    "broadcast_inplace": _argument_after("my_broadcast"),
    "allreduce_inplace": _argument_after("my_allreduce"),
    "allgather_untouched": _argument_after("my_allgather"),
    "all_to_all_untouched": _argument_after("my_all_to_all"),
    "tensor_parallel": _tensor_parallel,
    "tensor_parallel_nan": _tensor_parallel_nan,
    "tensor_parallel_shards": _tensor_parallel_shards,
    "ulysses": _ulysses,
}

#: The student module each kind needs; a missing or broken module fails only these cases.
MODULE_OF = {
    kind: ("src.transformer" if kind.startswith(("tensor", "ulysses")) else "src.collectives") for kind in BODIES
}
