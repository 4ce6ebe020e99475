"""``grader grade DIR --watch``: a student's loop.  Grade, show the grade, wait until a graded file
changes, grade again and show what changed, until Ctrl-C.

The gradings run inside :func:`grader.matrix.host.keep_spare`: each one starts the next one's session
host beside it, so a re-grade does not wait for Python and torch (the portable runtime has no host: it
starts cold every time).  The spare knows nothing of a grading before it takes it, so a re-grade is
graded exactly as a plain ``grader grade`` would grade the tree; leaving the loop closes it.

A change is seen by polling, with no dependency and on every OS: the size and modification time of
the files the grading reads (``intake.watched``, asked again after each grade, so a file created
later counts), every :data:`POLL_S`.  A change grades again once the files have held still for one
poll: an editor that saves in several writes gives one grade.  The stamps are taken before each
grading, so a save during a grading is the next one's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from grader.matrix.host import keep_spare
from grader.results import GradeResult

POLL_S = 0.2  # a save is seen in at most one poll and graded after one more: 0.2-0.4 s after it

#: Each watched path's (modification time in ns, size), or None where there is no file.
Stamps = dict[Path, tuple[int, int] | None]


def watch(
    grade: Callable[[], GradeResult],
    watched: Callable[[], Collection[Path]],
    show: Callable[[GradeResult, GradeResult | None], None],
    *,
    rounds: int | None = None,
    stop: threading.Event | None = None,
    poll_s: float = POLL_S,
) -> None:
    """Grade, ``show(result, the result before or None)``, wait for a change of a ``watched()`` file, and
    again.  Returns after ``rounds`` gradings when given, or once ``stop`` is set; Ctrl-C
    (``KeyboardInterrupt``) goes to the caller, the spare host closed on the way."""
    halt = stop if stop is not None else threading.Event()
    last: GradeResult | None = None
    done = 0
    with keep_spare(one_pack=True):  # one tree, one rubric: the spare may preload its pack at once
        while not halt.is_set():
            before = stamp(watched())
            result = grade()
            show(result, last)
            last, done = result, done + 1
            if done == rounds or not wait_for_change(watched(), before, stop=halt, poll_s=poll_s):
                return


def stamp(paths: Iterable[Path]) -> Stamps:
    """Each path's (modification time, size), None where nothing is there (not yet, or no more)."""
    stamps: Stamps = {}
    for path in paths:
        try:
            st = os.stat(path, follow_symlinks=False)  # intake reads no link: its own change is the change
        except OSError:
            stamps[path] = None
        else:
            stamps[path] = (st.st_mtime_ns, st.st_size)
    return stamps


def wait_for_change(paths: Collection[Path], before: Stamps, *, stop: threading.Event, poll_s: float = POLL_S) -> bool:
    """Block until the stamps of ``paths`` differ from ``before`` (a path new to the set differs) and then
    hold still for one poll: True; False once ``stop`` is set."""
    seen = before
    changed = False
    while not stop.is_set():
        now = stamp(paths)
        if changed and now == seen:
            return True
        changed = changed or now != before
        seen = now
        stop.wait(poll_s)
    return False
