"""Processes a rank or a group's init leaves behind, ended: whatever a case started (children, a fork
bomb, a ``setsid`` double fork) must not run beside the next case or outlive the grading.

A PID namespace ends everything of a group with its init, but only when the group ends: between
cases a rank with a uid of its own ends what its case left (:func:`end_strays`), and an init
without a PID namespace ends its descendants itself (:func:`reap_descendants`).  Read from
``/proc``, killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator


def pids() -> list[int]:
    """Every process of this PID namespace."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def state_of(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def descendants(ancestor: int, spare: frozenset[int] = frozenset()) -> dict[int, tuple[str, int]]:
    """Descendants of ``ancestor``, leaving out the ``spare`` processes and everything below them."""
    table = {pid: st for pid in pids() if (st := state_of(pid)) is not None}
    found: dict[int, tuple[str, int]] = {}
    frontier = [ancestor]
    while frontier:
        parent = frontier.pop()
        for pid, (state, ppid) in table.items():
            if ppid == parent and pid not in found and pid not in spare:
                found[pid] = (state, ppid)
                frontier.append(pid)
    return found


def ended_children() -> Iterator[tuple[int, int]]:
    """(pid, wait status) of each child of this process that has ended, reaped, without waiting for
    one that has not (a fork server's loop, woken by SIGCHLD)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, status


def end_strays(deadline_s: float = 1.0) -> None:
    """Rank side, after each case, for a rank with a uid of its own: SIGKILL every other process of
    that uid (what the case started and left running: children, a fork bomb, a ``setsid`` double
    fork) and reap the rank's own children, so that no case runs beside what an earlier one left.
    Only with a uid of its own: for a rank that shares the grader's uid, ``kill(-1)`` would reach
    the grader itself (the group's end takes those processes down instead)."""
    try:
        os.kill(-1, signal.SIGKILL)  # Linux never signals the caller with kill(-1)
    except ProcessLookupError:
        return  # the uid has no other process
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.005)  # killed, not yet exited; whatever outlasts the deadline is reaped next time


def reap_descendants(timeout: float = 2.0, spare: frozenset[int] = frozenset()) -> int:
    """Parent side: SIGKILL every descendant of this process and reap the ones that become ours.

    Kills all descendants but the ``spare`` ones and their subtrees: call it once the ranks' exit
    statuses have been collected.  The caller must be a child subreaper (PR_SET_CHILD_SUBREAPER)
    to catch processes that detached.  Returns how many were killed.
    """
    me = os.getpid()
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        found = descendants(me, spare)
        for pid, (state, _) in found.items():
            if state != "Z":
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
        for pid, (_, ppid) in found.items():
            if ppid == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        if not found or time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.01)
