"""A grading's share of the machine's memory (issue 58): where a batch runs ``--jobs`` gradings side by
side, the limits of all of them together fit the machine, so the kernel's out-of-memory killer acts inside
the grading that caused it (``cgroups.GradingCgroup``), never on a neighbour or the whole machine."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from grader.sandbox.cgroups import HEADROOM_MB

#: how many gradings a batch runs side by side (``grader batch --jobs``), set in each grade's environment
JOBS_ENV = "GRADER_BATCH_JOBS"
#: the machine's memory no grading counts on: the grader's own processes (a batch, its servers) and the system
RESERVE_MB = 1024


def memory_share_mb(machine_mb: int, jobs: int) -> int:
    """The memory one grading's group may hold: its part of the machine, less :data:`RESERVE_MB`, when
    ``jobs`` gradings run side by side.  The limits of every grading together then fit the machine, so
    the kernel's out-of-memory killer acts inside a grading's group, never on the whole machine."""
    return max(HEADROOM_MB, (machine_mb - RESERVE_MB) // max(1, jobs))


def machine_memory_mb() -> int:
    """MemTotal, in MiB (0 where /proc/meminfo does not say)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) >> 10
    return 0


def batch_jobs() -> int:
    """How many gradings run beside this one (:data:`JOBS_ENV`; 1 for a grading of its own)."""
    try:
        return max(1, int(os.environ.get(JOBS_ENV, "1")))
    except ValueError:
        return 1


def grading_memory_mb() -> int:
    """This grading's share: the machine's memory, among the gradings its batch runs side by side."""
    return memory_share_mb(machine_memory_mb(), batch_jobs())
