"""How long a case may run: its time budget, sized by what the case needs on this machine.

One fixed timeout made every hang cost 10 s, case after case.  A budget instead is the rubric's
floor plus a multiple of what the grader's own allreduce takes for as many bytes per rank at the
case's world size, measured in that world size's first group before any student code is imported
into it (:data:`CALIBRATION_BYTES` per rank, the median of three runs), and never more than the
rubric's ``case_timeout_s``.  With the default floor (1 s) and multiple (50), a correct solution ten
times slower than the grader's passes with room to spare on a loaded machine, and a hang costs a
second or two.  A world size whose calibration could not run gets the ceiling.
"""

from __future__ import annotations

from typing import Any

CALIBRATION_BYTES = 1 << 16  # per rank


def case_budget(limits: Any, measured: float | None, tensor_bytes: int) -> float:
    """Seconds a case may take: ``limits`` has the rubric's ``case_timeout_s`` (ceiling),
    ``case_timeout_floor_s`` and ``case_timeout_multiple``; ``measured`` is the calibration's seconds
    at the case's world size; ``tensor_bytes`` the size of one rank's main input."""
    if measured is None:
        return float(limits.case_timeout_s)
    need = measured * max(1.0, tensor_bytes / CALIBRATION_BYTES)
    return float(min(limits.case_timeout_s, limits.case_timeout_floor_s + limits.case_timeout_multiple * need))
