"""Rank side: a case's student threads inside one rank process.

Threads start in the order the caller gives (:func:`arrival_orders`: seeded, never rank order), each
once the one before it waits in its collective or is done (at most a few milliseconds apart), so the
order they reach a lock or barrier in varies from case to case and round to round, but never
between two gradings of one submission, and code that relies on arrival order shows.  The harness then waits for them:

- every thread finished: their results, in thread order;
- a thread raised: that exception, re-raised on the case's thread with the student's line (a
  ``BrokenBarrierError`` included), so it is the student's ``crash``.  Where several threads raised,
  the lowest-numbered thread's, a ``BrokenBarrierError`` (another thread's failure seen at a barrier)
  after every other (:func:`_first`): which raised first in time varies from run to run (the handout's
  template: thread 0's ``KeyError`` or another's ``None``), and the verdict must not;
- the unfinished threads sit on the same lines using no CPU for ``DEADLOCK_S`` (a barrier nobody
  else reaches, a lock never released), or the case's time runs out: :class:`~grader.runtimes.StuckThreads`, whose
  message names each stuck thread's line, and which the rank reports as ``hang``.

Python cannot stop a thread, so a thread still running when the case ends (stuck, or started by the
student and never joined) leaves the process unusable: the rank says so in its reply and the
session ends the process with the case (``grader.runtimes.torchdist.rank``).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from grader.runtimes import OUTSIDE, StuckThreads, collector_paused, student_line

DEADLOCK_S = 1.5  # unchanged lines and no CPU for this long: a deadlock
POLL_S = 0.05
JOIN_S = 0.2
STAGGER_S = 0.015  # at most between two threads' starts, in the seeded arrival order (see _settle)
SETTLE_POLL_S = 0.0005
RAISED_S = 0.1  # once a thread raised, the others still on one line in threading this long: they wait for it


def run(
    work: list[Callable[[], Any]],
    *,
    order: list[int],
    timeout_s: float,
    sandbox: str,
    failures: list[BaseException] | None = None,
) -> list[Any]:
    """Run each of ``work`` on its own thread (thread i runs ``work[i]``), started in ``order`` (a
    permutation of their indices); their results in thread order.  ``failures`` collects exceptions
    of threads the work starts itself (a thread pool's), which count as the threads' own."""
    before = set(threading.enumerate())
    results: list[Any] = [None] * len(work)
    errors: list[BaseException] = [] if failures is None else failures
    raised_by: dict[int, int] = {}  # id of an exception a thread of ours raised -> that thread's index
    done = [False] * len(work)
    finished = threading.Event()  # every thread done (or one raised): no polling delay on the way out

    if sorted(order) != list(range(len(work))):
        raise ValueError(f"{order} is not an order of {len(work)} threads")
    began = [threading.Event() for _ in work]  # in arrival order: a thread begins once the one before settled
    entered = [threading.Event() for _ in work]  # in arrival order: the thread is in its work

    def body(i: int, pos: int) -> None:
        if pos:
            began[pos - 1].wait()
            _settle(threads[pos - 1], lambda: done[order[pos - 1]], entered[pos - 1])
        began[pos].set()
        try:
            entered[pos].set()
            results[i] = work[i]()
        except BaseException as exc:  # the student's: re-raised on the case's thread below
            if exc not in errors:
                raised_by[id(exc)] = i
                errors.append(exc)
        finally:
            done[i] = True
            if all(done) or errors:
                finished.set()

    threads = [threading.Thread(target=body, args=(i, pos), daemon=True) for pos, i in enumerate(order)]
    for t in threads:
        t.start()
    names = {t.ident: f"thread {i}" for i, t in zip(order, threads, strict=True)}
    _wait(before, finished, done, errors, entered, timeout_s, sandbox, names)
    if errors:
        raise _first(errors, raised_by)
    for t in threading.enumerate():
        if t not in before:
            t.join(timeout=JOIN_S)  # ours are past their work; a student's may be about to end
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    if left:  # started by the student and never joined: it would run into the next case
        raise StuckThreads("a thread was left running after the case: " + _where_all(left, sandbox, names))
    return results


def _first(errors: list[BaseException], raised_by: dict[int, int]) -> BaseException:
    """The exception a case reports: the lowest-numbered thread's, a ``BrokenBarrierError`` after any
    other.  One that a thread the work started raised (``failures``: a thread pool's) comes before the
    work's own, which follows from it (the handout's driver re-raises it); among those, the first in
    time, as the work's own code saw them (``min`` keeps the list's order among equals)."""

    def rank(exc: BaseException) -> tuple[bool, int]:
        return isinstance(exc, threading.BrokenBarrierError), raised_by.get(id(exc), -1)

    return min(errors, key=rank)


def _settle(before: threading.Thread, finished: Callable[[], bool], entered: threading.Event) -> None:
    """Until the thread that began before this one is done or waits in ``threading`` (a barrier, a
    condition: it has reached its collective) on two polls in a row, and at most ``STAGGER_S``: it
    reaches the shared buffer first, as a fixed ``STAGGER_S`` apart would have made it, without
    waiting the rest of ``STAGGER_S`` when it got there sooner."""
    deadline = time.monotonic() + STAGGER_S
    waits = 0
    while time.monotonic() < deadline and not finished():
        waits = waits + 1 if entered.is_set() and _blocked(before) else 0
        if waits == 2:
            return
        time.sleep(SETTLE_POLL_S)


def arrival_order(n: int, seed: int) -> list[int]:
    """A seeded permutation of ``range(n)`` that is not the identity (for n > 1)."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return order[::-1] if order == sorted(order) else order


def arrival_orders(n: int, seed: int, count: int) -> list[list[int]]:
    """The arrival orders of a case's ``count`` rounds, none of them rank order (for n > 1).  The
    session derives ``seed`` from the grading's secret, so no fixed rule in the student's code can
    predict them; from 3 threads on, one at least is neither the reversal nor a rotation of rank
    order, so a context that recognises such a schedule and undoes it fails like any other that
    relies on arrival order.  (With 2 threads the reversal is the only order that is not rank order.)"""
    draw = random.Random(seed)
    orders = [arrival_order(n, draw.getrandbits(64)) for _ in range(count)]
    while n >= 3 and count and not any(map(_irregular, orders)):
        orders[-1] = arrival_order(n, draw.getrandbits(64))
    return orders


def _irregular(order: list[int]) -> bool:
    """Neither rank order reversed nor rank order rotated (the identity is a rotation)."""
    n = len(order)
    return order != list(range(n))[::-1] and all(order != [(i + k) % n for i in range(n)] for k in range(n))


def _wait(
    before: set[threading.Thread],
    finished: threading.Event,
    done: list[bool],
    errors: list[Any],
    entered: list[threading.Event],
    timeout_s: float,
    sandbox: str,
    names: dict[int | None, str],
) -> None:
    start = time.monotonic()
    still: tuple[Any, ...] = ()
    since, cpu_since = start, time.process_time()
    while not all(done):
        finished.wait(POLL_S)
        finished.clear()
        now = time.monotonic()
        alive = [t for t in threading.enumerate() if t not in before and t.is_alive()]  # theirs too
        frames = _frames()  # one read per poll: every thread's line and whether it waits, at one moment
        at = [frames.get(t.ident or -1) for t in alive]
        lines = tuple(_where(frame, sandbox) for frame in at)
        if lines != still:
            still, since, cpu_since = lines, now, time.process_time()
        if errors and all(e.is_set() for e in entered) and all(map(_in_threading, at)) and now - since >= RAISED_S:
            # a thread raised and the rest wait for it: the exception is the cause.  Every thread has
            # begun (one waiting its turn is in threading too) and has waited on one line for RAISED_S
            # (one just let through a barrier is still in threading): each has raised or waits as its
            # own code says, so which raised (``_first`` picks among them) does not depend on timing
            return
        if now - since > DEADLOCK_S and time.process_time() - cpu_since < 0.1 * (now - since):
            if errors:
                return
            raise StuckThreads("deadlock, the threads wait for each other: " + _where_all(alive, sandbox, names))
        if now - start > timeout_s:
            if errors:
                return
            raise StuckThreads(f"timed out after {timeout_s:.0f} s: " + _where_all(alive, sandbox, names))


def _frames() -> dict[int, FrameType]:
    with collector_paused():
        return sys._current_frames()


def _in_threading(frame: FrameType | None) -> bool:
    return frame is not None and frame.f_code.co_filename == threading.__file__


def _blocked(thread: threading.Thread) -> bool:
    return _in_threading(_frames().get(thread.ident or -1))


def _where(frame: FrameType | None, sandbox: str) -> str:
    """Where a thread whose innermost frame is ``frame`` is: ``at hw12.ipynb, cell 3:27 in all_gather
    (waiting in wait)``, its innermost line of student code."""
    waiting = ""
    if frame is not None and _in_threading(frame):
        inner = frame
        while inner.f_back is not None and _in_threading(inner.f_back):
            inner = inner.f_back
        waiting = f" (waiting in {inner.f_code.co_name})"
    return (student_line(frame, sandbox) or "is " + OUTSIDE) + waiting


def _where_all(threads: list[threading.Thread], sandbox: str, names: dict[int | None, str]) -> str:
    frames = _frames()
    return "; ".join(f"{names.get(t.ident, t.name)} {_where(frames.get(t.ident or -1), sandbox)}" for t in threads)
