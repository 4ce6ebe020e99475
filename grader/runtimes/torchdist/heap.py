"""glibc's malloc thresholds for the processes that compute a grade's tensors (issue 23).

Every case allocates and frees tensors of up to tens of MiB (inputs, expected values, replies), and
with glibc's defaults each large one went back to the kernel when freed, to be faulted in page by
page the next time: A9's session took 156,000 page faults a grading, 86,000 with this; its ranks
265,000, 203,000 with this.  :func:`keep_freed` has allocations under 32 MiB (glibc's ceiling for its
own dynamic threshold) come from the heap, and keeps up to ``trim`` bytes freed at the heap's top.
"""

from __future__ import annotations

import ctypes

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 << 20
SESSION_TRIM = 1 << 30  # the session: one per grading, its memory is not the student's
RANK_TRIM = 64 << 20  # a rank: what it keeps counts against its memory limit, so a modest amount


def keep_freed(trim: int) -> None:
    """Keep the memory this process frees, up to ``trim`` bytes, for its next case."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:  # glibc's; another C library keeps its own policy
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(M_TRIM_THRESHOLD, trim)
