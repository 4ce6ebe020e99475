"""The matrix of HW12 as plain data (no torch).

A case's name is ``f"{test}[{id}]"``, its test naming the handout's part (``test_part1_all_gather``,
``test_part3_1_column_forward``, ...).  ``ws`` is the simulated world size: the number of threads of
one process in Part 1, Part 3.3 and ``split_batch`` (``processes: 1``), the number of rank processes,
each behind the trusted context, in ``dp_step`` and the layers' cases (see docs/rubric-rationale-hw12.md).
"""

from __future__ import annotations

from dataclasses import replace

from grader.pack import Case, engine_params

#: Why world size 1 weighs nothing (``grader.pack.Case.degenerate``).
ONE_RANK = (
    "world size 1: one rank needs no communication, so a context, step or layer that ignores the other ranks passes"
)
WORLD_SIZES = tuple(range(1, 9))
PROCESS_WORLD_SIZES = (1, 2, 3, 4, 6, 8)  # every size divides the layers' widths below
THREAD_TIMEOUT_S = 10.0  # a case's threads; the rubric's case budget leaves the rank time to reply

#: The handout's name each kind exercises (the hang rule skips a name's later cases at one world size).
FUNCTION_OF = {
    "all_gather": "DistributedContext.all_gather",
    "all_reduce": "DistributedContext.all_reduce",
    "context_mixed": "DistributedContext",
    "inputs_untouched": "DistributedContext (inputs)",  # advisory: its failure never calls in a stand-in
    "split_batch": "split_batch",
    "dp_step": "dp_step",
    "column_forward": "ColumnParallelLinear",
    "column_backward": "ColumnParallelLinear.backward",
    "row_forward": "RowParallelLinear",
    "row_backward": "RowParallelLinear.backward",
    "tp_training": "replace_to_tp_simple_mlp",
}
#: The names Part 1's cases grade: once one failed, Part 3.3 trains with the grader's own context.
CONTEXT_FUNCTIONS = frozenset({"DistributedContext", "DistributedContext.all_gather", "DistributedContext.all_reduce"})

#: (dtype, shape) per collective: all_reduce's mean only of floating tensors (the handout's "averaged")
GATHER_TYPES = (("float32", (3, 4)), ("float64", (5,)), ("int64", (2, 3, 4)))
SUM_TYPES = (("float32", (3, 4)), ("float64", (6,)), ("int64", (2, 3)))
MEAN_TYPES = (("float32", (3, 4)), ("float64", (5,)))
MIXED_OPS = ("all_gather", "sum", "mean", "all_gather", "sum")  # one context, a group id per call
MIXED_ROUNDS = 3  # threads joined between rounds (as run_dp_process does between epochs); ids reused
#: rounds of a Part 1 case about one collective, each in an arrival order of its own, on a fresh context
#: (reuse is test_part1_reuse_and_groups's question: a defect there is charged there only)
ORDERS = 3

#: (d_in, d_hidden, d_out, examples per rank): the handout's two models
DP_MODELS = ((16, 32, 2, 5), (2, 16, 1, 10))
DP_EPOCHS = 3
#: (in, out, batch) per layer: the sharded width (column: out, row: in) divisible by every process world size
LAYER_SHAPES = {"column": ((8, 24, 6), (6, 48, 5)), "row": ((24, 8, 6), (48, 6, 5))}
TP_MODELS = ((2, 32, 1, 50), (4, 48, 2, 24))  # (d_in, d_hidden, d_out, batch)
TP_WORLD_SIZES = (1, 2, 4, 8)
TP_EPOCHS = 5
NAN_HINT = (
    "NaN: this rank computed on rows outside its own slice of the batch, which the grader fills with NaN; "
    "each rank must use only split_batch(x, rank, world_size)"
)


def _shape_id(dtype: str, shape: tuple[int, ...]) -> str:
    return f"{dtype}-{'x'.join(map(str, shape))}"


def _one_process(ws: int, **params: object) -> dict[str, object]:
    """A world of ``ws`` threads (or plain calls) in one rank process."""
    return {**engine_params(processes=1), "world_size": ws, "thread_timeout_s": THREAD_TIMEOUT_S, **params}


FRESH: dict[str, object] = {"rounds": ORDERS, "fresh_context": True}


def all_cases() -> list[Case]:
    cases: list[Case] = []
    for ws in WORLD_SIZES:
        for dtype, shape in GATHER_TYPES:
            params = _one_process(ws, ops=["all_gather"], dtype=dtype, shape=list(shape), **FRESH)
            cases.append(Case("test_part1_all_gather", f"ws{ws}-{_shape_id(dtype, shape)}", ws, "all_gather", params))
        for op, types in (("sum", SUM_TYPES), ("mean", MEAN_TYPES)):
            for dtype, shape in types:
                params = _one_process(ws, ops=[op], dtype=dtype, shape=list(shape), **FRESH)
                cases.append(
                    Case("test_part1_all_reduce", f"ws{ws}-{op}-{_shape_id(dtype, shape)}", ws, "all_reduce", params)
                )
        params = _one_process(ws, ops=list(MIXED_OPS), dtype="float32", shape=[4, 3], rounds=MIXED_ROUNDS)
        cases.append(Case("test_part1_reuse_and_groups", f"ws{ws}", ws, "context_mixed", params))
        params = _one_process(
            ws, ops=["all_gather", "sum", "mean"], dtype="float32", shape=[3, 2], check_inputs=True, **FRESH
        )
        cases.append(Case("test_part1_inputs_untouched", f"ws{ws}", ws, "inputs_untouched", params))
        for batch in sorted({4 * ws, 4 * ws + 1, 5 * ws - 1} - {0}):
            cases.append(
                Case("test_part2_split_batch", f"ws{ws}-b{batch}", ws, "split_batch", _one_process(ws, batch=batch))
            )
    for ws in PROCESS_WORLD_SIZES:
        for m, (d_in, d_hidden, d_out, per_rank) in enumerate(DP_MODELS):
            params = {
                "model": [d_in, d_hidden, d_out],
                "batch": per_rank * ws,
                "epochs": DP_EPOCHS,
                **engine_params(nan_hint=NAN_HINT),
            }
            cases.append(Case("test_part2_dp_step", f"ws{ws}-m{m}", ws, "dp_step", params))
        for layer, part in (("column", "part3_1"), ("row", "part3_2")):
            for d_in, d_out, batch in LAYER_SHAPES[layer]:
                sizes: dict[str, object] = {"in": d_in, "out": d_out, "batch": batch}
                for step in ("forward", "backward"):
                    cases.append(
                        Case(f"test_{part}_{layer}_{step}", f"ws{ws}-{d_in}x{d_out}", ws, f"{layer}_{step}", sizes)
                    )
    for ws in TP_WORLD_SIZES:
        for m, (d_in, d_hidden, d_out, batch) in enumerate(TP_MODELS):
            params = _one_process(ws, model=[d_in, d_hidden, d_out], batch=batch, epochs=TP_EPOCHS)
            cases.append(Case("test_part3_3_tp_training", f"ws{ws}-m{m}", ws, "tp_training", params))
    return [replace(case, degenerate=ONE_RANK) if case.world_size == 1 else case for case in cases]
