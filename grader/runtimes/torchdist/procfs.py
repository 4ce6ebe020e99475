"""Session side: what /proc says about a rank process, read from outside it (CPU time, runnable
threads, thread count, children, its pid in its own namespace).  Linux only: the portable runtime
never calls these."""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # Windows: the portable runtime


def activity(pid: int) -> tuple[int, bool]:
    """(CPU ticks used, some thread runnable) of a process, from /proc; (-1, False) once it is gone."""
    used = ticks(pid)
    if used < 0:
        return -1, False
    try:
        runnable = False
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                runnable |= f.read().rsplit(")", 1)[1].split()[0] == "R"
        return used, runnable
    except (OSError, IndexError):
        return -1, False


def ticks(pid: int) -> int:
    """CPU ticks a process used, every thread included (one read); -1 once it is gone."""
    if not pid:
        return -1
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return -1


def threads(pid: int) -> int:
    """Threads of a live process (0 once it is gone or was never known)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) if pid else 0
    except OSError:
        return 0


def cpu_percent(start: int, end: int, seconds: float) -> int | None:
    """CPU used between two /proc readings of a process, in percent of one CPU (None if unreadable)."""
    if start < 0 or end < 0 or seconds <= 0:
        return None
    return round(100 * (end - start) / CLK_TCK / seconds)


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def ns_pid(pid: int) -> int:
    """The pid a process has in its own (innermost) PID namespace."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
