"""Runner side: every case's inputs and the values each rank must return.

Inputs are made here and *sent* to the ranks, so a rank sees only its own input, and expected
values come from the grader's own code (``reference_model.py`` for the transformer), never from
the student's ``forward``.  Data are seeded from the case id and a salt that only the matrix
session holds (random per grading, or the instructor's secret for a reproducible regrade), so a
rank can neither recompute its peers' inputs nor the expected outputs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grader.pack import Case, Prepared, Refused, exact_sum
from grader.packs.a9 import reference_model
from grader.packs.a9.shards import SHARD_NAMES, SHARDED
from grader.sandbox.wire import DTYPES

_Preparer = Callable[[Case, torch.Generator], "Prepared"]
Tensors = dict[str, torch.Tensor]


def generator(case: Case, salt: str) -> torch.Generator:
    return torch.Generator().manual_seed(case.seed(salt))


def _data(gen: torch.Generator, shape: list[int] | tuple[int, ...], dtype: str) -> torch.Tensor:
    """Random data; integer-valued where sums must be exact whatever the reduction order."""
    if dtype == "int64":
        return torch.randint(-50, 50, tuple(shape), generator=gen)
    if dtype == "bfloat16":
        return torch.randint(-8, 8, tuple(shape), generator=gen).to(torch.bfloat16)
    return torch.randn(tuple(shape), generator=gen, dtype=DTYPES[dtype])


def _wire_shape(case: Case) -> list[int]:
    """Shape sent over the wire; a transposed layout is sent contiguous and transposed back by the rank."""
    shape = list(case.params["shape"])
    return shape[::-1] if case.params.get("layout") == "transposed" else shape


def _logical(t: torch.Tensor, case: Case) -> torch.Tensor:
    return t.t() if case.params.get("layout") == "transposed" else t


def _tolerance(dtype: str, ws: int) -> dict[str, float]:
    if dtype == "float32":
        return {"rtol": 1e-5, "atol": 1e-5 * max(ws, 1)}
    if dtype == "float64":
        return {"rtol": 1e-10, "atol": 1e-10 * max(ws, 1)}
    return {"rtol": 0.0, "atol": 0.0}


def prepare(case: Case, salt: str) -> Prepared:
    return _PREPARERS[case.kind](case, generator(case, salt))


def _per_rank_inputs(case: Case, gen: torch.Generator) -> list[torch.Tensor]:
    return [_data(gen, _wire_shape(case), case.params["dtype"]) for _ in range(case.world_size)]


def _broadcast(case: Case, gen: torch.Generator) -> Prepared:
    xs = _per_rank_inputs(case, gen)
    src = xs[case.params["src"]]
    return Prepared(
        inputs=[{"x": x} for x in xs],
        expected=[{"out": _logical(src, case)} for _ in xs],
        tensor_bytes=src.numel() * src.element_size(),
        tolerance={"rtol": 0.0, "atol": 0.0},
    )


def _sum(xs: list[torch.Tensor]) -> torch.Tensor:
    return exact_sum(xs).to(xs[0].dtype)


def _allreduce(case: Case, gen: torch.Generator) -> Prepared:
    xs = _per_rank_inputs(case, gen)
    total = _logical(_sum(xs), case)
    return Prepared(
        inputs=[{"x": x} for x in xs],
        expected=[{"out": total} for _ in xs],
        tensor_bytes=xs[0].numel() * xs[0].element_size(),
        tolerance=_tolerance(case.params["dtype"], case.world_size),
    )


def _allgather(case: Case, gen: torch.Generator) -> Prepared:
    xs = _per_rank_inputs(case, gen)
    gathered = torch.cat([_logical(x, case) for x in xs], dim=0)
    return Prepared(
        inputs=[{"x": x} for x in xs],
        expected=[{"out": gathered} for _ in xs],
        tensor_bytes=xs[0].numel() * xs[0].element_size(),
        tolerance={"rtol": 0.0, "atol": 0.0},
    )


def _reduce_scatter(case: Case, gen: torch.Generator) -> Prepared:
    xs = _per_rank_inputs(case, gen)
    chunks = _logical(_sum(xs), case).chunk(case.world_size, dim=0)
    return Prepared(
        inputs=[{"x": x} for x in xs],
        expected=[{"out": chunk} for chunk in chunks],
        tensor_bytes=xs[0].numel() * xs[0].element_size(),
        tolerance=_tolerance(case.params["dtype"], case.world_size),
    )


def all_to_all_shape(case: Case) -> list[int]:
    ws = case.world_size
    if case.params.get("large"):
        return [2, ws * 256, ws * 16, 64]  # 2 * 256 * 16 * 64 * ws^2 >= 1M elements at ws >= 2
    return [2 * ws, ws, 2 * ws, 3 * ws]  # every dim divisible by ws: any (scatter, gather) pair works


def expected_all_to_all(xs: list[torch.Tensor], scatter_dim: int, gather_dim: int) -> list[torch.Tensor]:
    ws = len(xs)
    return [torch.cat([x.chunk(ws, dim=scatter_dim)[r] for x in xs], dim=gather_dim) for r in range(ws)]


def _all_to_all(case: Case, gen: torch.Generator) -> Prepared:
    shape = all_to_all_shape(case)
    transposed = case.params.get("layout") == "transposed"
    wire = shape[:-2] + shape[-2:][::-1] if transposed else shape
    xs = [_data(gen, wire, case.params["dtype"]) for _ in range(case.world_size)]
    logical = [x.transpose(-1, -2) if transposed else x for x in xs]
    outs = expected_all_to_all(logical, case.params["scatter_dim"], case.params["gather_dim"])
    return Prepared(
        inputs=[{"x": x} for x in xs],
        expected=[{"out": o} for o in outs],
        tensor_bytes=xs[0].numel() * xs[0].element_size(),
        tolerance={"rtol": 0.0, "atol": 0.0},
    )


def _inplace(kind: str) -> _Preparer:
    def prepare_inplace(case: Case, gen: torch.Generator) -> Prepared:
        shaped = Case(case.test, case.id, case.world_size, kind, {**case.params, "dtype": "float32", "shape": [3, 4]})
        prepared = _PREPARERS[kind](shaped, gen)
        prepared.expected = [{"arg": e["out"]} for e in prepared.expected]
        return prepared

    return prepare_inplace


def _untouched(kind: str) -> _Preparer:
    """The input of every rank must read the same after the call: the op has no right to it."""

    def prepare_untouched(case: Case, gen: torch.Generator) -> Prepared:
        params = {**case.params, "dtype": "float32", "shape": [4, 3]}
        shaped = Case(case.test, case.id, case.world_size, kind, params)
        prepared = _PREPARERS[kind](shaped, gen)
        prepared.expected = [{"arg": inp["x"]} for inp in prepared.inputs]
        return prepared

    return prepare_untouched


def _transformer(case: Case, gen: torch.Generator) -> Prepared:
    p = case.params
    dtype = DTYPES[p["dtype"]]
    weights = {k: v.to(dtype) for k, v in reference_model.random_weights(p["d_model"], p["dim_ff"], gen).items()}
    x = torch.randn(p["batch"], p["seq"], p["d_model"], generator=gen, dtype=dtype)
    y = reference_model.forward(weights, x, p["n_heads"])
    ws = case.world_size
    # sums across ranks come in another order than the serial forward's
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-10}
    nbytes = x.numel() * x.element_size()
    if case.kind == "ulysses":
        xs, ys = x.chunk(ws, dim=1), y.chunk(ws, dim=1)
        inputs = [{"x": xs[r].contiguous(), **weights} for r in range(ws)]
        return Prepared(inputs, [{"out": ys[r]} for r in range(ws)], nbytes, tol)
    inputs = [{"x": x, **weights} for _ in range(ws)]
    if case.kind == "tensor_parallel_shards":
        return Prepared(inputs, [reference_model.shards(weights, r, ws) for r in range(ws)], nbytes, tol)
    return Prepared(inputs, [{"out": y} for _ in range(ws)], nbytes, tol)


def carry(case: Case, inputs: list[Tensors], returned: list[Tensors]) -> list[Tensors]:
    """Each rank's input to the tensor-parallel forward: its ``x``, the parameters the handout does
    not shard, and the ``*_shard`` attributes its ``init_tensor_parallel_shards`` made, nothing else.

    The group's shards together may hold each weight at most once (by bytes): a rank that kept a
    full weight under a shard's name would carry the serial forward across, while any layout of a
    real split (even a lopsided one) fits."""
    shard_keys = [[k for k in r if k.partition(":")[0] in SHARD_NAMES] for r in returned]
    held = sum(_bytes(returned[r][k]) for r, keys in enumerate(shard_keys) for k in keys)
    full = sum(_bytes(inputs[0][name]) for name in SHARDED)
    if held > full:
        raise Refused(
            f"the ranks' *_shard attributes hold {held} bytes together, more than the {full} bytes of the weights "
            "they shard: a tensor-parallel rank holds its shard, not a copy of the full weights"
        )
    unsharded = [{k: v for k, v in r.items() if k not in SHARDED} for r in inputs]
    return [{**base, **{k: returned[r][k] for k in shard_keys[r]}} for r, base in enumerate(unsharded)]


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


_PREPARERS: dict[str, _Preparer] = {
    "broadcast": _broadcast,
    "allreduce": _allreduce,
    "allgather": _allgather,
    "reduce_scatter": _reduce_scatter,
    "all_to_all": _all_to_all,
    "broadcast_inplace": _inplace("broadcast"),
    "allreduce_inplace": _inplace("allreduce"),
    "allgather_untouched": _untouched("allgather"),
    "all_to_all_untouched": _untouched("all_to_all"),
    "tensor_parallel": _transformer,
    "tensor_parallel_shards": _transformer,
    "ulysses": _transformer,
}
