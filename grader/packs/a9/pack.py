"""Assignment 9 as the engine sees it: the :class:`~grader.pack.AssignmentPack` named ``a9``.

Session side only (the zygote imports ``grader.packs.a9.bodies`` and nothing of this module).
"""

from __future__ import annotations

from pathlib import Path

from grader.pack import AssignmentPack, Diagram, Handoff, bundled_rubric, bundled_starter, lazy
from grader.packs.a9 import catalog

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("my_broadcast", "my_allreduce", "my_allgather", "my_reduce_scatter", "my_all_to_all")


PACK = AssignmentPack(
    id="a9",
    title="Assignment 9 — Collectives & Parallelism",
    rubric=bundled_rubric("a9"),
    test_file=HERE / "test_a9.py",
    bodies="grader.packs.a9.bodies",
    cases=catalog.all_cases,
    prepare=lazy("grader.packs.a9.expected:prepare"),  # torch: imported by a grading only
    module_of={
        kind: ("src.transformer" if kind in catalog.TASK2_KINDS else "src.collectives") for kind in catalog.FUNCTION_OF
    },
    function_of=catalog.FUNCTION_OF,
    # a Task 1 defect is charged once, in Task 1: Task 2 runs with the grader's own collectives in its place
    stand_ins={kind: frozenset(COLLECTIVES) for kind in catalog.TASK2_KINDS},
    placeholders={"src.collectives": COLLECTIVES},  # transformer.py imports them
    imports_before={"src.transformer": ("src.collectives",)},
    attributed=COLLECTIVES,
    # "Use the sharded weights stored in self.*_shard": only they reach the forward's fresh process
    handoffs={"tensor_parallel": Handoff("tensor_parallel_init", lazy("grader.packs.a9.expected:carry"))},
    diagram=Diagram(
        case="test_trace_all_to_all[ws4]",
        function="my_all_to_all",
        title="Your my_all_to_all at world size 4: time vs rank",
    ),
    starter=(bundled_starter("a9"),),
)
