"""When a case is a deadlock: every unfinished rank blocked in communication, unchanged, using under a
tenth of the elapsed time in CPU, for the rubric's ``deadlock_after_s``.  One rule, read from what each
rank group can see: the full sandbox's :class:`Window` from the ranks' status slots and /proc (outside
the ranks), the portable group's :func:`by_watchdogs` from each rank's watchdog thread (advisory, as
everything that runtime measures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grader.runtimes.torchdist import procfs
from grader.sandbox.status import StatusSlot

SAMPLE_S = 0.02  # how often /proc is read while every unfinished rank says it is blocked
WATCHDOG_POLL_S = 0.25  # how often the portable group asks the ranks' watchdogs
IDLE_SHARE = 0.1  # blocked ranks that use more CPU than this share of the time are still working


@dataclass
class Window:
    """A stretch of time in which every unfinished rank reports itself blocked, unchanged.  /proc is
    read every ``SAMPLE_S`` only, from the first sample on: the ranks of a healthy case block and
    unblock many times a case, and reading every thread's state on each change cost A9's session
    0.7 s (issue 23); a deadlock is seen at most one sample later."""

    slots: list[tuple[int, int, str]]
    next_sample: float
    start: float = 0.0  # the first sample's time; the window is judged from there
    ticks: int = 0  # CPU ticks of the blocked ranks at the first sample
    last_ticks: int = 0  # and at the latest
    samples: int = 0
    runnable: int = 0  # samples in which some thread was waiting for a CPU

    def sample(self, now: float, activity: list[tuple[int, bool]]) -> None:
        ticks = sum(t for t, _ in activity)
        if not self.samples:
            self.start, self.ticks = now, ticks
        self.samples += 1
        self.runnable += any(runnable for _, runnable in activity)
        self.next_sample = now + SAMPLE_S
        self.last_ticks = ticks

    def deadlocked(self, now: float, after_s: float) -> bool:
        elapsed = now - self.start
        cpu_s = (self.last_ticks - self.ticks) / procfs.CLK_TCK
        return elapsed > after_s and cpu_s < IDLE_SHARE * elapsed and self.runnable * 2 < self.samples


def by_watchdogs(
    where: dict[int, dict[str, Any]], previous: tuple[float, dict[int, Any]] | None, now: float, after_s: float
) -> tuple[tuple[float, dict[int, Any]] | None, str]:
    """Every unfinished rank answered, each blocked in communication with the same status as before,
    using under a tenth of the elapsed time in CPU, for ``after_s``: a deadlock by the ranks' own account.
    Returns the window to pass back next time, and "deadlock" or ""."""
    blocked = {r: (a.get("seq"), a.get("cpu_s", 0.0)) for r, a in where.items() if a.get("state") == StatusSlot.BLOCKED}
    if not where or len(blocked) != len(where):
        return None, ""
    if previous is None or {r: s for r, (s, _) in blocked.items()} != {r: s for r, (s, _) in previous[1].items()}:
        return (now, blocked), ""
    since, before = previous
    cpu = sum(float(c) - float(before[r][1]) for r, (_, c) in blocked.items())
    if now - since > after_s and cpu < IDLE_SHARE * (now - since):
        return previous, "deadlock"
    return previous, ""
