"""The matrix of Assignment 4 as plain data (no torch).

A case's name is ``f"{test}[{id}]"``.  Seeds: ``s1`` is the handout's 42, ``s2`` is drawn from the
grading's salt (``expected.seed_of``), so a hard-coded 42 shows.
"""

from __future__ import annotations

from grader.pack import Case

WORLD_SIZES = (1, 2, 4, 8)  # all divide global_batch_size 128 and output_dim 32
ACCUMULATION_STEPS = (1, 2, 4, 8)
SEEDS = ("s1", "s2")

#: The handout's name each kind exercises: a case fails "not implemented" when the script lacks it.
FUNCTION_OF = {
    "single_step": "single_step",
    "grad_accumulation": "single_step_with_grad_accumulation",
    "data_parallel": "data_parallel_single_step",
    "broadcast_parallel": "BroadcastParallel",
    "gather_parallel": "GatherParallel",
    "column_shard": "FullColumnParallelLinear",
    "column_output": "FullColumnParallelLinear",
    "column_step": "full_column_parallel_single_step",
}
#: Said when a data-parallel rank's weight holds NaN (the grader's batch holds NaN outside its slice).
NAN_HINT = (
    "NaN: this rank computed on rows outside its own slice of the batch, which the grader fills with NaN; "
    "each rank must use only rows rank * local_batch_size up to (rank + 1) * local_batch_size"
)


def all_cases() -> list[Case]:
    cases = [Case("test_single_step", f"ws1-{s}", 1, "single_step", {"seed": s}) for s in SEEDS]
    cases += [
        Case("test_grad_accumulation", f"ws1-k{k}-{s}", 1, "grad_accumulation", {"seed": s, "steps": k})
        for k in ACCUMULATION_STEPS
        for s in SEEDS
    ]
    cases += [
        Case("test_data_parallel", f"ws{ws}-{s}", ws, "data_parallel", {"seed": s, "nan_hint": NAN_HINT})
        for ws in WORLD_SIZES
        for s in SEEDS
    ]
    for test, kind in (("test_broadcast_parallel", "broadcast_parallel"), ("test_gather_parallel", "gather_parallel")):
        cases += [Case(test, f"ws{ws}", ws, kind, {}) for ws in WORLD_SIZES]
    cases += [Case("test_column_parallel_shard", f"ws{ws}", ws, "column_shard", {"seed": "s2"}) for ws in WORLD_SIZES]
    cases += [Case("test_column_parallel_output", f"ws{ws}", ws, "column_output", {"seed": "s2"}) for ws in WORLD_SIZES]
    cases += [
        Case("test_column_parallel_step", f"ws{ws}-{s}", ws, "column_step", {"seed": s})
        for ws in WORLD_SIZES
        for s in SEEDS
    ]
    return cases


def cases_of(test: str) -> list[Case]:
    return [c for c in all_cases() if c.test == test]
