"""The matrix of Assignment 4 as plain data (no torch).

A case's name is ``f"{test}[{id}]"``.  Seeds: ``s1`` is the handout's 42, ``s2`` is drawn from the
grading's salt (``expected.seed_of``), so a hard-coded 42 shows.  Layouts: the handout launches
with torchrun "on 4 nodes", one process per node (``LOCAL_RANK`` is 0 on every rank); the parallel
parts run so at every world size (the plain ``ws{n}`` ids: n nodes x 1), and those cases pay.  Two
launches the handout never uses run at world size 4 as feedback that weighs nothing: one node of
4 (``ws4-1x4...``, where ``local_rank`` is ``rank``) and 2 nodes x 2 (``ws4-2x2...``).  So code that
takes ``local_rank`` for ``rank`` fails where it is paid, and the feedback shows where it would pass.
"""

from __future__ import annotations

from grader.pack import Case, Layout, engine_params

WORLD_SIZES = (1, 2, 4, 8)  # all divide global_batch_size 128 and output_dim 32
ACCUMULATION_STEPS = (1, 2, 4, 8)
SEEDS = ("s1", "s2")
#: the launches a parallel part also runs under at world size 4, reported and never paid
FEEDBACK_LAYOUTS = (Layout(1, 4), Layout(2, 2))

#: Why the cases a part grades nothing at are weighed 0 (``grader.pack.Case.degenerate``).
ONE_RANK = "world size 1: one rank needs no communication, so code that ignores the other ranks passes"
ONE_STEP = "accumulation_steps 1: nothing accumulates, so code that neither scales nor slices right passes"
NOT_THE_HANDOUTS_LAUNCH = "a launch the handout never uses: it runs one process per node, where LOCAL_RANK is 0"

#: The handout's name each kind exercises: a case fails "not implemented" when the script lacks it.
FUNCTION_OF = {
    "single_step": "single_step",
    "grad_accumulation": "single_step_with_grad_accumulation",
    "data_parallel": "data_parallel_single_step",
    "broadcast_parallel": "BroadcastParallel",
    "gather_parallel": "GatherParallel",
    "column_shard": "FullColumnParallelLinear",
    "column_output": "FullColumnParallelLinear",
    "column_input_grad": "FullColumnParallelLinear",
    "column_step": "full_column_parallel_single_step",
}
#: Said when a data-parallel rank's weight holds NaN (the grader's batch holds NaN outside its slice).
NAN_HINT = (
    "NaN: this rank computed on rows outside its own slice of the batch, which the grader fills with NaN; "
    "each rank must use only rows rank * local_batch_size up to (rank + 1) * local_batch_size "
    "(rank, not local_rank: the handout runs one process per node, where every local_rank is 0)"
)


def _parallel(test: str, kind: str, params: dict[str, object], seeds: tuple[str, ...] = ()) -> list[Case]:
    """A parallel part's cases: every world size as the handout launches it (one process per node),
    and world size 4 under the launches it never uses."""
    launches = [(f"ws{ws}", Layout(ws, 1)) for ws in WORLD_SIZES]
    launches += [(f"ws{layout.world_size}-{layout}", layout) for layout in FEEDBACK_LAYOUTS]
    cases = []
    for where, layout in launches:
        for s in seeds or (None,):
            ident = where if s is None else f"{where}-{s}"
            case_params = params if s is None else {**params, "seed": s}
            if layout in FEEDBACK_LAYOUTS:
                degenerate: str | None = NOT_THE_HANDOUTS_LAUNCH
            else:
                degenerate = ONE_RANK if layout.world_size == 1 else None
            cases.append(Case(test, ident, layout.world_size, kind, case_params, layout=layout, degenerate=degenerate))
    return cases


def all_cases() -> list[Case]:
    cases = [Case("test_single_step", f"ws1-{s}", 1, "single_step", {"seed": s}) for s in SEEDS]
    cases += [
        Case(
            "test_grad_accumulation",
            f"ws1-k{k}-{s}",
            1,
            "grad_accumulation",
            {"seed": s, "steps": k},
            degenerate=ONE_STEP if k == 1 else None,
        )
        for k in ACCUMULATION_STEPS
        for s in SEEDS
    ]
    cases += _parallel("test_data_parallel", "data_parallel", engine_params(nan_hint=NAN_HINT), SEEDS)
    for test, kind in (("test_broadcast_parallel", "broadcast_parallel"), ("test_gather_parallel", "gather_parallel")):
        cases += [Case(test, f"ws{ws}", ws, kind, {}, degenerate=ONE_RANK if ws == 1 else None) for ws in WORLD_SIZES]
    cases += [Case("test_column_parallel_shard", f"ws{ws}", ws, "column_shard", {"seed": "s2"}) for ws in WORLD_SIZES]
    cases += _parallel("test_column_parallel_output", "column_output", {"seed": "s2"})
    cases += _parallel("test_column_parallel_input_grad", "column_input_grad", {"seed": "s2"})
    cases += _parallel("test_column_parallel_step", "column_step", {}, SEEDS)
    return cases
