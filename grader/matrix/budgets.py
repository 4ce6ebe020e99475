"""How long a case may run: its time budget, sized by what the case needs on this machine.

One fixed timeout made every hang cost 10 s, case after case.  A budget instead is the rubric's
floor plus a multiple of what the grader's own allreduce takes for as many bytes per rank at the
case's world size, measured in that world size's first group before any student code is imported
into it (:data:`CALIBRATION_BYTES` per rank, the median of three runs), and never more than the
rubric's ``case_timeout_s``.  With the default floor (1 s) and multiple (50), a correct solution ten
times slower than the grader's passes with room to spare on a loaded machine, and a hang costs a
second or two.  A world size whose calibration could not run gets the ceiling.

A verdict must not follow the machine's speed or load (issue 43: a case flooding the wire with small
messages was ``tampering`` on one machine and ``hang`` on a slower one), so past its budget a case is
stopped only when it has used its time (:func:`out_of_time`): the budget counts the case's own time,
the wall clock less what other programs took of the machine meanwhile (``procfs.OwnTime``), up to
:data:`MAX_STRETCH` times the budget; and a case whose ranks' messages are still crossing the wire (its
capture saw their data grow within :data:`FLOWING_S`; a TCP probe or an ACK is no progress) is making
progress, and runs on up to the ceiling.  A rank that spins or sleeps is stopped at the budget as
before; an endless exchange, at the ceiling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CALIBRATION_BYTES = 1 << 16  # per rank
#: a case that is not exchanging messages runs at most this many times its budget, however loaded the machine
MAX_STRETCH = 4.0
#: a case whose captured data grew this recently is still exchanging it: it is not stopped before the ceiling
FLOWING_S = 0.25


def case_budget(limits: Any, measured: float | None, tensor_bytes: int) -> float:
    """Seconds a case may take: ``limits`` has the rubric's ``case_timeout_s`` (ceiling),
    ``case_timeout_floor_s`` and ``case_timeout_multiple``; ``measured`` is the calibration's seconds
    at the case's world size; ``tensor_bytes`` the size of one rank's main input."""
    if measured is None:
        return float(limits.case_timeout_s)
    need = measured * max(1.0, tensor_bytes / CALIBRATION_BYTES)
    return float(min(limits.case_timeout_s, limits.case_timeout_floor_s + limits.case_timeout_multiple * need))


def out_of_time(limits: Any, budget: float, wall: float, own: Callable[[float], float], quiet: float) -> bool:
    """Has a case used its time?  ``wall`` seconds since it began; ``own(wall)`` the part of them that was
    the case's own (called only when needed: it reads /proc); ``quiet`` the seconds since its ranks' last
    data grew on the wire (infinite where nothing is measured)."""
    if wall <= budget:
        return False
    if wall > max(budget, float(limits.case_timeout_s)):
        return True
    if quiet < FLOWING_S:
        return False
    return wall > budget * MAX_STRETCH or own(wall) > budget


def grace_over(grace: float, wall: float, own: Callable[[float], float], ceiling: float) -> bool:
    """Have the ranks of a case one of whose ranks failed had ``grace`` seconds to report?  Counted in
    their own time (``own(wall)``, ``wall`` seconds since the failure: ``procfs.Unstarved``, the wall
    time less the longest any of them, or the session that feeds them their inputs, was kept waiting for
    a CPU), never in wall-clock time alone: a rank starved by a neighbour's processes is not charged with
    the time it could not run (issue 58: a
    neighbour's spinners made a template's ``not_implemented`` a ``crash``).  A rank that runs, or is
    blocked, spends its own time, so the grace ends as before wherever nothing starves it; a starved
    one is waited for up to ``ceiling``, the case's own limit (``case_timeout_s``)."""
    if wall <= grace:
        return False
    return wall > ceiling or own(wall) > grace
