"""Runtimes: how student code runs and communicates.

A runtime is the layer of the grader that knows how an assignment's student code is launched, what
it calls to exchange data, how that is analysed before it runs and guarded, traced and measured
while it runs.  The engine around it (intake, rubric, scoring, rendering, the CLI) is the same for
every assignment, and a pack names the runtime it needs (``AssignmentPack.runtime``).
``torchdist`` is torch.distributed on Gloo, in sandboxed rank processes; ``threads`` is a
thread-simulated ``DistributedContext`` (HW12): a case's threads in one sandboxed process, or its
ranks in processes of their own behind a trusted context, on torchdist's process machinery.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

#: ``grader grade --isolation``: how the torchdist runtime starts its ranks (``torchdist.mode.decide``).
ISOLATION_MODES = ("auto", "full", "portable")


class BadReturn(Exception):
    """A student function returned what the handout does not promise (a list where a tensor was due):
    raised by a pack's rank-side bodies, the case's ``bad_return`` verdict with this message."""


class StuckThreads(Exception):
    """Student threads that never finished (a deadlock, a thread left running, the case's time): raised
    by the threads runtime's harness, the case's ``hang`` verdict with this message."""


_PAUSE = threading.Lock()  # one pause at a time: two threads' enable and disable would interleave


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Run a ``sys._current_frames()`` with the garbage collector off, as later CPython releases do
    inside the call (python/cpython#106883): a collection inside it can run Python code that lets go
    of the GIL while the call holds the runtime's lock on the thread list, and a thread being started
    then (``Thread.start``, GIL held) waits for that lock: both wait for ever.  Seen here on 3.11.7: an
    HW12 case whose threads watch each other's frames hung for its whole budget (a ``hang`` where the
    student's code crashes) in about 1 grading of 10 under CPU contention.  It yields nothing, so the
    frames stay behind the audit hook's rule (``grader.sandbox.audit``); a collector the student turned
    off stays off."""
    with _PAUSE:
        enabled = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if enabled:
                gc.enable()


#: The runtimes this grader has -> what each puts in a rank before its pack's bodies.  Every runtime runs
#: on torchdist's process machinery (the zygote, rank groups, the sandbox), which every rank imports; the
#: threads runtime adds the harness its packs' student threads run in.
RANK_MODULES: dict[str, tuple[str, ...]] = {
    "torchdist": (),
    "threads": ("grader.runtimes.threads.harness",),
}
AVAILABLE = frozenset(RANK_MODULES)


@dataclass(frozen=True)
class RankSide:
    """What a pack's rank processes import before any student code, by name: the zygote, the session's
    host and the portable workers are told this (``AssignmentPack.rank_side``), never the pack's
    session-side module, so no catalog or expected value reaches a rank."""

    bodies: str  # the pack's rank-side module: BODIES, kind -> body
    runtime: str  # AssignmentPack.runtime: its RANK_MODULES are imported first
    path: tuple[str, ...] = ()  # where a pack that is not installed lives

    @property
    def modules(self) -> tuple[str, ...]:
        """In import order: the runtime's rank-side modules, then the pack's bodies."""
        return (*RANK_MODULES[self.runtime], self.bodies)

    def to_json(self) -> dict[str, object]:
        return {"bodies": self.bodies, "runtime": self.runtime, "path": list(self.path)}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> RankSide:
        """From the runner, a trusted process (``grader.matrix.host``); a runtime it does not know is a bug."""
        path = data["path"]
        assert isinstance(path, list)
        side = cls(str(data["bodies"]), str(data["runtime"]), tuple(str(p) for p in path))
        assert side.runtime in RANK_MODULES, side.runtime
        return side


#: where :func:`student_line` finds no frame of the student's: said of a thread, and what tells the session a
#: counted thread is not the submission's to be charged for (``grader.matrix.verdicts.threads_left``)
OUTSIDE = "outside the student's code"


def student_line(frame: FrameType | None, sandbox: str) -> str:
    """Where a thread is in the student's code, from its innermost ``frame`` outward:
    ``at collectives.py:22 in _spin`` ("" when none of its frames is the student's).  What a student
    needs to find a thread that hung or was left running."""
    while frame is not None and not frame.f_code.co_filename.startswith(sandbox):
        frame = frame.f_back
    if frame is None:
        return ""
    return f"at {frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} in {frame.f_code.co_name}"


def require(runtime: str, pack: str) -> None:
    """A pack that needs a runtime this grader does not have is the user's error, said at once."""
    from grader.errors import UserError  # here: every rank imports this package, and holds only its runtime

    if runtime not in AVAILABLE:
        have = ", ".join(sorted(AVAILABLE))
        raise UserError(f"the assignment pack {pack!r} runs on the {runtime!r} runtime; this grader has: {have}")
