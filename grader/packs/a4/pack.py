"""Assignment 4 as the engine sees it: the :class:`~grader.pack.AssignmentPack` named ``a4``.

Session side only (the zygote imports ``grader.packs.a4.bodies`` and nothing of this module).
"""

from __future__ import annotations

from pathlib import Path

from grader.pack import AssignmentPack, bundled_rubric, bundled_starter, lazy
from grader.packs.a4 import catalog

HERE = Path(__file__).resolve().parent


PACK = AssignmentPack(
    id="a4",
    title="Assignment 4 — Data and Tensor Parallelism",
    rubric=bundled_rubric("a4"),
    test_file=HERE / "test_a4.py",
    bodies="grader.packs.a4.bodies",
    cases=catalog.all_cases,
    prepare=lazy("grader.packs.a4.expected:prepare"),  # torch: imported by a grading only
    module_of={kind: "assignment4" for kind in catalog.FUNCTION_OF},
    function_of=catalog.FUNCTION_OF,
    imports=False,  # its module level starts NCCL on GPUs: the bodies read the definitions out of the source
    starter=(bundled_starter("a4"),),
)
