"""Session side: what /proc says about a rank process, read from outside it (CPU time, runnable
threads, thread count, children, its pid in its own namespace), and how much of the machine a case
had (:class:`OwnTime`) and how long its ranks waited for a CPU (:class:`Unstarved`).  Linux only: the
portable runtime never calls these."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

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


def machine_ticks() -> tuple[int, int]:
    """(every CPU tick of the machine, the busy ones) since boot, from /proc/stat's first line.  Steal,
    the time a hypervisor gave another guest, is busy: it is time this machine's processes lost."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in f.readline().split()[1:9])
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total, total - idle - iowait


class OwnTime:
    """How much of a case's wall time was the case's own: the wall time less the share of the machine's
    CPU that everything outside the case took meanwhile (other programs, another guest of the host).

    A case's budget is counted in this time, so a case that ends within its budget on an idle machine
    ends within it on a loaded or noisy one too, and its verdict does not follow the machine's load
    (issue 43: a flooded case was ``tampering`` on one machine and ``hang`` on a slower one).  What the
    case's ranks (``pids``) use is theirs, however many of them share the cores: the budget's calibration
    ran in the same group.  The session's own work, reading their capture, is given back like any other's."""

    def __init__(self, pids: Sequence[int]) -> None:
        self._last = {pid: max(0, ticks(pid)) for pid in pids}
        self._total, self._busy = machine_ticks()
        self._ours = sum(self._last.values())

    def _used(self) -> int:
        """Ticks the case's processes used so far; a process that ended keeps its last reading."""
        for pid in self._last:
            self._last[pid] = max(self._last[pid], ticks(pid))
        return sum(self._last.values())

    def seconds(self, wall: float) -> float:
        """The part of ``wall`` seconds (since this object was made) that was the case's own."""
        total, busy = machine_ticks()
        if total <= self._total:
            return wall
        others = max(0, (busy - self._busy) - (self._used() - self._ours))
        return wall * max(0.0, 1.0 - others / (total - self._total))


def _sched(pid: int) -> dict[str, tuple[str, int, int]]:
    """tid -> (state, ns on a CPU, ns runnable but waiting for one) of each thread of a process (the
    kernel's ``stat`` and ``schedstat``); empty once it is gone."""
    found = {}
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ran, waited = (int(v) for v in f.read().split()[:2])
                found[tid] = (state, ran, waited)
    return found


@dataclass
class _Thread:
    ran: int  # ns on a CPU, at the last reading
    waited: int  # ns of run delay the kernel has added up, at the last reading
    read: float  # when that was
    since: float | None = None  # runnable and not run since then: waiting for a CPU


class Unstarved:
    """How much of the wall time since it was made every one of some processes had to itself: the wall
    time less the longest any of them was kept waiting for a CPU meanwhile.  Time a process spent
    blocked, or running, is its own; time it was ready to run and was not given a CPU (a neighbour's
    processes held them) is given back.

    The kernel adds a wait to a thread's run delay only once the thread runs again, so a thread still
    waiting is seen by the readings: runnable at two of them with no CPU time between, it has waited
    since the first."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.began = now = time.monotonic()
        self._threads = {
            pid: {tid: _Thread(ran, waited, now) for tid, (_, ran, waited) in _sched(pid).items()} for pid in pids
        }
        self._start = {pid: sum(t.waited for t in threads.values()) for pid, threads in self._threads.items()}

    def seconds(self, wall: float) -> float:
        now, longest = time.monotonic(), 0.0
        for pid, threads in self._threads.items():
            pending = 0.0
            for tid, (state, ran, waited) in _sched(pid).items():
                seen = threads.setdefault(tid, _Thread(ran, waited, now))
                stuck = state == "R" and ran == seen.ran and waited == seen.waited
                seen.since = (seen.since if seen.since is not None else seen.read) if stuck else None
                seen.ran, seen.waited, seen.read = ran, waited, now
                pending += now - seen.since if seen.since is not None else 0.0
            waited_ns = sum(t.waited for t in threads.values()) - self._start[pid]
            longest = max(longest, waited_ns / 1e9 + pending)
        return max(0.0, wall - longest)
