"""The tutorial pack as the engine loads it: ``ringpack.pack:PACK``, named by its rubric.

Session side only.  Loading it imports no torch: ``prepare`` is imported at its first call
(``lazy``), so ``grader rubric validate`` checks the rubric's patterns against the catalog at once.
"""

from __future__ import annotations

from pathlib import Path

from grader.pack import AssignmentPack, lazy
from ringpack import catalog

HERE = Path(__file__).resolve().parent

# [pack]
PACK = AssignmentPack(
    id="ring",
    title="Ring collectives (the tutorial pack)",
    rubric=HERE / "rubric.yaml",
    test_file=HERE / "test_ring.py",
    bodies="ringpack.bodies",  # the rank side, imported by rank processes only
    cases=catalog.cases,
    prepare=lazy("ringpack.expected:prepare"),
    module_of=dict.fromkeys(catalog.FUNCTION_OF, "ring"),  # every kind imports the student's ring.py
    function_of=catalog.FUNCTION_OF,
    # a broken ring_send_right costs its own item only: the grader's stands in for it in the others
    stand_ins=dict.fromkeys(("reduce_scatter", "all_gather"), frozenset({"ring_send_right"})),
    attributed=("ring_send_right", "ring_reduce_scatter", "ring_all_gather"),
    starter=(HERE / "template",),  # never evidence of copying (grader similarity)
)
# [/pack]
