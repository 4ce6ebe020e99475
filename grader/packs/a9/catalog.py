"""The hidden matrix of Assignment 9 as plain data: which cases exist and with what parameters.

Pure Python (no torch), so a rubric can be validated against the case ids cheaply.  A case's
full id is ``f"{test}[{id}]"``, exactly the JUnit testcase name pytest writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from grader.pack import Case, engine_params

WORLD_SIZES = (1, 2, 3, 4, 5, 8)
#: Why world size 1 weighs nothing (``grader.pack.Case.degenerate``).
ONE_RANK = "world size 1: one rank needs no communication, so a function that ignores the other ranks passes"
LARGE = 1 << 20  # "one large tensor (at least 1M elements)"


TASK2_KINDS = frozenset({"tensor_parallel", "tensor_parallel_shards", "ulysses"})

#: The student function each kind exercises.  A failing Task 1 case marks its function as failed, and
#: Task 2 then runs with the grader's known-good version of it (see ``grader.packs.a9.trusted``); a
#: function that hangs at a world size is not run again at that world size.
FUNCTION_OF = {
    "broadcast": "my_broadcast",
    "broadcast_inplace": "my_broadcast",
    "allreduce": "my_allreduce",
    "allreduce_inplace": "my_allreduce",
    "allgather": "my_allgather",
    "allgather_untouched": "my_allgather",
    "reduce_scatter": "my_reduce_scatter",
    "all_to_all": "my_all_to_all",
    "all_to_all_untouched": "my_all_to_all",
    "tensor_parallel": "forward_tensor_parallel",
    "tensor_parallel_shards": "init_tensor_parallel_shards",
    "ulysses": "forward_ulysses",
}


@dataclass(frozen=True)
class TransformerConfig:
    """One shape of the Task 2 block and the world sizes it divides evenly (heads, sequence, dim_ff)."""

    d_model: int
    n_heads: int
    dim_ff: int
    seq: int
    batch: int
    dtype: str = "float32"
    world_sizes: tuple[int, ...] = ()

    @property
    def id(self) -> str:
        dtype = "" if self.dtype == "float32" else f"-{self.dtype}"
        return f"d{self.d_model}h{self.n_heads}f{self.dim_ff}s{self.seq}b{self.batch}{dtype}"

    def params(self) -> dict[str, Any]:
        return {
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "dim_ff": self.dim_ff,
            "seq": self.seq,
            "batch": self.batch,
            "dtype": self.dtype,
        }


NAN_HINT = (
    "NaN: the forward read a full weight; the forward runs in a fresh process that holds the *_shard "
    "attributes init_tensor_parallel_shards made and NaN in place of every full weight they shard"
)
ULYSSES_HINT = (
    "NaN in the result: in this case whatever reaches a rank outside my_all_to_all is NaN, so the sequence "
    "exchange did not carry the activations through my_all_to_all, as the handout requires"
)

#: head_dim 8 and 16; dim_ff 1.5x to 4x d_model; batch 1 to 3; sequences of 8 to 24 tokens; float64
#: as well as float32; world sizes 2, 3, 4 and 8 (and 1, unweighted).  Every world size listed
#: divides n_heads, seq and dim_ff, as the handout lets a student assume.
CONFIGS = (
    TransformerConfig(32, 4, 64, 8, 1, world_sizes=(1, 2, 4)),
    TransformerConfig(48, 6, 72, 12, 2, world_sizes=(2, 3)),
    TransformerConfig(48, 3, 144, 9, 1, world_sizes=(3,)),
    TransformerConfig(64, 8, 256, 16, 3, world_sizes=(2, 4, 8)),
    TransformerConfig(128, 8, 192, 24, 2, "float64", world_sizes=(2, 4, 8)),
    TransformerConfig(64, 4, 128, 20, 2, "float64", world_sizes=(2, 4)),
)


def _shape_id(shape: tuple[int, ...]) -> str:
    return "large1M" if shape == (LARGE,) else "x".join(map(str, shape))


def _tensor_case(
    test: str, kind: str, ws: int, dtype: str, shape: tuple[int, ...], layout: str = "", **extra: Any
) -> Case:
    prefix = f"ws{ws}-" + "".join(f"{k}{v}-" for k, v in extra.items())
    params = {"dtype": dtype, "shape": list(shape), "layout": layout, **extra}
    return Case(test, f"{prefix}{dtype}-{_shape_id(shape)}", ws, kind, params)


def _variants(ws: int, divisible_dim0: bool) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, shape) variants: 1-D, 2-D, 3-D, every dtype Gloo carries, and an awkward size."""
    k = ws if divisible_dim0 else 1
    variants = [("float32", (4 * k, 5)), ("float64", (7 * k,)), ("int64", (2 * k, 3, 4)), ("bfloat16", (3 * k, 2))]
    if not divisible_dim0:
        variants.append(("float32", (13,)))  # 13 is prime: never divisible by ws > 1
    return variants


def _noncontig(test: str, kind: str, ws: int, divisible_dim0: bool, **extra: Any) -> Case:
    """A non-contiguous input (a transposed view): robustness the handout does not ask for."""
    k = ws if divisible_dim0 else 1
    return _tensor_case(f"{test}_noncontig", kind, ws, "float32", (6 * k, 4), "transposed", **extra)


def _task1() -> list[Case]:
    cases: list[Case] = []
    for ws in WORLD_SIZES:
        for src in range(ws):
            cases.append(_tensor_case("test_broadcast", "broadcast", ws, "float32", (4, 5), src=src))
        src = ws // 2
        for dtype, shape in _variants(ws, divisible_dim0=False)[1:]:
            cases.append(_tensor_case("test_broadcast", "broadcast", ws, dtype, shape, src=src))
        cases.append(_noncontig("test_broadcast", "broadcast", ws, False, src=src))
        cases.append(Case("test_broadcast_inplace", f"ws{ws}-src{ws - 1}", ws, "broadcast_inplace", {"src": ws - 1}))
    cases.append(_tensor_case("test_broadcast", "broadcast", 4, "float32", (LARGE,), src=1))

    for ws in WORLD_SIZES:
        for dtype, shape in _variants(ws, divisible_dim0=False):
            cases.append(_tensor_case("test_allreduce", "allreduce", ws, dtype, shape))
        cases.append(_noncontig("test_allreduce", "allreduce", ws, False))
        cases.append(Case("test_allreduce_inplace", f"ws{ws}", ws, "allreduce_inplace", {}))
    cases.append(_tensor_case("test_allreduce", "allreduce", 4, "float32", (LARGE,)))

    for ws in WORLD_SIZES:
        for dtype, shape in _variants(ws, divisible_dim0=False):
            cases.append(_tensor_case("test_allgather", "allgather", ws, dtype, shape))
        cases.append(_noncontig("test_allgather", "allgather", ws, False))
    cases.append(_tensor_case("test_allgather", "allgather", 2, "float32", (LARGE,)))
    cases.append(Case("test_allgather_input_untouched", "ws4", 4, "allgather_untouched", {}))

    for ws in WORLD_SIZES:
        for dtype, shape in _variants(ws, divisible_dim0=True):
            cases.append(_tensor_case("test_reduce_scatter", "reduce_scatter", ws, dtype, shape))
        cases.append(_noncontig("test_reduce_scatter", "reduce_scatter", ws, True))
    cases.append(_tensor_case("test_reduce_scatter", "reduce_scatter", 4, "float32", (LARGE,)))

    cases.extend(_all_to_all())
    cases.append(
        Case(
            "test_all_to_all_input_untouched",
            "ws4",
            4,
            "all_to_all_untouched",
            {"scatter_dim": 0, "gather_dim": 1},
        )
    )
    return cases


def _a2a(ws: int, s: int, g: int, dtype: str = "float32", layout: str = "", large: bool = False) -> Case:
    test = "test_all_to_all_noncontig" if layout else "test_all_to_all"
    params = {"scatter_dim": s, "gather_dim": g, "dtype": dtype, "layout": layout, "large": large}
    return Case(test, f"ws{ws}-s{s}g{g}-{dtype}{'-large1M' if large else ''}", ws, "all_to_all", params)


def _all_to_all() -> list[Case]:
    cases = [_a2a(4, s, g) for s in range(4) for g in range(4)]  # every pair, equal dims included
    for ws in (1, 2, 3, 5, 8):
        # the two Ulysses layouts (heads <-> sequence), an equal pair and a batch/last-dim pair
        cases += [_a2a(ws, 2, 1), _a2a(ws, 1, 2), _a2a(ws, 0, 0), _a2a(ws, 3, 0)]
    cases += [_a2a(4, -2, -3), _a2a(2, -1, 0), _a2a(4, 2, -3)]
    cases += [_a2a(3, 2, 1, "float64"), _a2a(4, 1, 2, "int64"), _a2a(2, 2, 1, "bfloat16")]
    cases += [_a2a(4, 2, 1, layout="transposed"), _a2a(2, 2, 1, large=True)]
    return cases


def _task2() -> list[Case]:
    cases = []
    for kind, test in (
        ("tensor_parallel", "test_tensor_parallel"),
        ("tensor_parallel_shards", "test_tensor_parallel_shards"),
        ("ulysses", "test_ulysses"),
    ):
        for config in CONFIGS:
            for ws in config.world_sizes:
                params = config.params()
                if kind == "ulysses":  # "You must use my_all_to_all()": what arrives any other way is NaN
                    params.update(engine_params(must_use="my_all_to_all", nan_hint=ULYSSES_HINT))
                if kind == "tensor_parallel":  # the full weights are NaN by the time the forward runs
                    params.update(engine_params(nan_hint=NAN_HINT))
                cases.append(Case(test, f"ws{ws}-{config.id}", ws, kind, params))
    return cases


def _trace_probes() -> list[Case]:
    """Cases whose full event trace is kept: the rubric judges algorithms from them."""
    small = CONFIGS[0].params()
    return [
        Case(
            "test_trace_broadcast",
            "ws8",
            8,
            "broadcast",
            {"dtype": "float32", "shape": [1024], "src": 0, "layout": ""},
        ),
        Case("test_trace_allreduce", "ws8", 8, "allreduce", {"dtype": "float32", "shape": [4096], "layout": ""}),
        Case(
            "test_trace_all_to_all",
            "ws4",
            4,
            "all_to_all",
            {"scatter_dim": 2, "gather_dim": 1, "dtype": "float32", "layout": "", "large": False},
        ),
        Case("test_trace_tensor_parallel", "ws4", 4, "tensor_parallel", {**small, **engine_params(nan_hint=NAN_HINT)}),
        Case(
            "test_trace_ulysses",
            "ws4",
            4,
            "ulysses",
            {**small, **engine_params(must_use="my_all_to_all", nan_hint=ULYSSES_HINT)},
        ),
    ]


def all_cases() -> list[Case]:
    cases = _task1() + _task2() + _trace_probes()
    for case in cases:
        case.params.update(
            engine_params(
                keep_events=case.test.startswith("test_trace_"),
                must_communicate=case.kind not in TASK2_KINDS,  # "only send/recv": agreeing without a message cheats
            )
        )
    return [replace(case, degenerate=ONE_RANK) if case.world_size == 1 else case for case in cases]


def all_case_ids() -> list[str]:
    return [c.name for c in all_cases()]


def tests() -> list[str]:
    return list(dict.fromkeys(c.test for c in all_cases()))
