"""HW12 as the engine sees it: the :class:`~grader.pack.AssignmentPack` named ``hw12``.

Session side only (the zygote imports ``grader.packs.hw12.bodies`` and what it imports).
"""

from __future__ import annotations

from pathlib import Path

from grader.pack import AssignmentPack, CodePiece, bundled_rubric, bundled_starter, lazy
from grader.packs.hw12 import catalog

HERE = Path(__file__).resolve().parent


def _compared(root: Path) -> list[CodePiece]:
    """Every definition the ranks take from the notebook (the last of each name), not only the graded ones:
    all of them run in a rank, and a copied helper is copied code."""
    from grader.similarity.extract import definitions, read_module

    found = read_module(PACK, root, "hw12")
    return [] if found is None else definitions(found)


PACK = AssignmentPack(
    id="hw12",
    title="Homework 12 — Simulated Data and Tensor Parallelism",
    rubric=bundled_rubric("hw12"),
    test_file=HERE / "test_hw12.py",
    bodies="grader.packs.hw12.bodies",
    cases=catalog.all_cases,
    prepare=lazy("grader.packs.hw12.expected:prepare"),  # torch: imported by a grading only
    module_of={kind: "hw12" for kind in catalog.FUNCTION_OF},
    function_of=catalog.FUNCTION_OF,
    # Part 3.3 trains with the grader's context once the student's failed Part 1: charged once
    stand_ins={"tp_training": catalog.CONTEXT_FUNCTIONS},
    imports=False,  # a notebook is read, never run: the bodies take its definitions out by AST
    runtime="threads",
    files={"hw12": ("hw12.ipynb", "hw12.py")},
    compared=_compared,
    starter=(bundled_starter("hw12"),),
)
