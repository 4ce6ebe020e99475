"""Rank side: the body of every Assignment 9 case.

A body receives this rank's input tensors (made by the runner) and the student's modules, calls
the student function under test and returns named tensors for the runner to compare.  Bodies do
no checking: the verdict is the runner's (``verdicts.py``), made from values it computed itself.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import torch

from grader.packs.a9 import trusted
from grader.packs.a9.shards import SHARD_NAMES, SHARDED
from grader.runtimes import BadReturn

Tensors = dict[str, torch.Tensor]


class Student(Protocol):
    stand_ins: dict[Any, str]  # the guard's: code of a grader function -> the student function it replaces

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


def _new_block(student: Student, params: dict[str, Any], dtype: torch.dtype) -> Any:
    mod = student.module("src.transformer")
    config = mod.TransformerConfig(
        d_model=params["d_model"], n_heads=params["n_heads"], dim_ff=params["dim_ff"], dropout_p=0.0
    )
    return mod.BasicTransformerBlock(config).to(dtype)


def _block(student: Student, params: dict[str, Any], t: Tensors) -> Any:
    block = _new_block(student, params, t["x"].dtype)
    block.load_state_dict({k: v for k, v in t.items() if k != "x"}, strict=True)
    return block.eval()


def _poison_sharded(block: torch.nn.Module) -> None:
    """Replace every sharded full parameter with NaNs, so a forward that computes from the full
    weights (the serial forward, then a sum) returns NaN."""
    for name in SHARDED:
        owner, attr = name.split(".")
        layer = getattr(block, owner)
        old = getattr(layer, attr)
        setattr(layer, attr, torch.nn.Parameter(torch.full_like(old, float("nan")), requires_grad=False))


#: How a shard that is not a plain tensor travels: ``name:linear`` (+ ``name:linear.bias``) for a
#: sharded ``nn.Linear``, ``name:none`` for an attribute set to None ("if present").
_LINEAR, _NONE = ":linear", ":none"


def _tensor_parallel_init(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    """The first half of a tensor-parallel case: ``init_tensor_parallel_shards`` on the full block,
    returning exactly the attributes the handout names.  Nothing else of this process reaches the
    forward, which the session runs in a fresh process (``expected.carry`` checks what crosses)."""
    block = _block(student, params, t)
    with substituted(student, params):
        block.init_tensor_parallel_shards()
    out: Tensors = {}
    for name in SHARD_NAMES:
        value = getattr(block, name, _NONE)
        if value is _NONE:
            continue
        if value is None:
            out[name + _NONE] = torch.empty(0)
        elif isinstance(value, torch.nn.Linear):
            out[name + _LINEAR] = value.weight.detach()
            if value.bias is not None:
                out[name + _LINEAR + ".bias"] = value.bias.detach()
        else:
            out[name] = _tensor(value, f"init_tensor_parallel_shards (attribute {name})").detach()
    return out


def _tensor_parallel(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    """The second half, in a process that never saw the full weights: a fresh block of the student's
    class with NaN for every full weight the handout shards, the grader's values for the rest
    (layer norms, unsharded biases), and the shards the first half made, as they were made."""
    block = _new_block(student, params, t["x"].dtype)
    _poison_sharded(block)
    names = set(SHARD_NAMES)
    block.load_state_dict({k: v for k, v in t.items() if k != "x" and k.split(":")[0] not in names}, strict=False)
    for key, value in t.items():
        name, _, form = key.partition(":")
        if name not in names or form == "linear.bias":
            continue
        if form == "none":
            setattr(block, name, None)
        elif form == "linear":
            bias = t.get(key + ".bias")
            linear = torch.nn.Linear(value.shape[1], value.shape[0], bias=bias is not None, dtype=value.dtype)
            linear.weight = torch.nn.Parameter(value, requires_grad=False)
            if bias is not None:
                linear.bias = torch.nn.Parameter(bias, requires_grad=False)
            setattr(block, name, linear)
        else:
            setattr(block, name, value)
    block.eval()
    with substituted(student, params):
        try:
            out = block.forward_tensor_parallel(t["x"])
        except AttributeError as exc:  # the same exception, its student frames kept, with the reason
            if exc.args and isinstance(exc.args[0], str):
                exc.args = (exc.args[0] + f" ({_CROSSES})", *exc.args[1:])
            raise
        return {"out": _tensor(out, "forward_tensor_parallel")}


_CROSSES = (
    "the forward runs in a fresh process, and of what init_tensor_parallel_shards set only the handout's "
    "*_shard attributes reach it"
)


def _tensor_parallel_shards(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    block = _block(student, params, t)
    with substituted(student, params):
        block.init_tensor_parallel_shards()
    out = {}
    for name in SHARD_NAMES:
        value = getattr(block, name, None)
        if isinstance(value, torch.nn.Linear):  # a sharded Linear is a fair reading of "shard"
            value = value.weight
        out[name] = _tensor(value, f"init_tensor_parallel_shards (attribute {name})").detach()
    return out


def _ulysses(student: Student, params: dict[str, Any], t: Tensors) -> Tensors:
    block = _block(student, params, t)
    with substituted(student, params):
        return {"out": _tensor(block.forward_ulysses(t["x"]), "forward_ulysses")}


@contextlib.contextmanager
def substituted(student: Student, params: dict[str, Any]) -> Iterator[None]:
    """Run with the grader's known-good version of each Task 1 function named in ``params["trusted"]``
    (the session lists those with a failing case): in ``src.collectives`` and under every name in
    ``src.transformer`` that is bound to the student's function, aliases included."""
    names = [n for n in params.get("trusted", []) if n in trusted.COLLECTIVES]
    if not names:
        yield
        return
    collectives = sys.modules["src.collectives"]  # the student's, or the placeholder of a broken one
    transformer = student.module("src.transformer")
    saved: list[tuple[Any, str, Any]] = []
    for name in names:
        stand_in = trusted.COLLECTIVES[name]
        student.stand_ins[stand_in.__code__] = name
        original = getattr(collectives, name, None)
        targets = [(collectives, name)]
        targets += [(transformer, attr) for attr, value in list(vars(transformer).items()) if value is original]
        for module, attr in dict.fromkeys(targets):
            saved.append((module, attr, getattr(module, attr, None)))
            setattr(module, attr, stand_in)
    try:
        yield
    finally:
        for module, attr, value in reversed(saved):
            setattr(module, attr, value)


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
    "tensor_parallel_init": _tensor_parallel_init,
    "tensor_parallel": _tensor_parallel,
    "tensor_parallel_shards": _tensor_parallel_shards,
    "ulysses": _ulysses,
}
