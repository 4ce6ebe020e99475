"""The machine's process table, as the tests that prove a grading left nothing behind read it."""

from __future__ import annotations

import os
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, namespaced ones included (seen from the host's /proc)."""
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for task in listdir(f"/proc/{parent}/task"):
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                if child not in found:
                    found.add(child)
                    frontier.append(child)
    return found


def comm(pid: int) -> str:
    """What ``ps`` names ``pid`` (its ``comm``); "" for a process that is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cases_decided(pid: int) -> int:
    """How many cases the matrix session ``pid`` has decided: a session's cwd is its grading's
    ``matrix/session``, beside the ledger it writes a verdict line per case to.  0 for any other
    process, or one that is gone."""
    try:
        cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        if cwd.name != "session":
            return 0
        return (cwd.parent / "ledger.jsonl").read_text().count('"verdict"')
    except OSError:
        return 0


def other_test_processes() -> set[int]:
    """Processes another pytest-xdist worker of this run started (its worker and everything below it):
    a test that looks at the whole machine while the suite runs on several workers leaves them out."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return set()
    siblings = descendants(os.getppid()) - descendants(os.getpid()) - {os.getpid()}
    return siblings


def listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
