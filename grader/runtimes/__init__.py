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

#: ``grader grade --isolation``: how the torchdist runtime starts its ranks (``torchdist.mode.decide``).
ISOLATION_MODES = ("auto", "full", "portable")


class BadReturn(Exception):
    """A student function returned what the handout does not promise (a list where a tensor was due):
    raised by a pack's rank-side bodies, the case's ``bad_return`` verdict with this message."""


class StuckThreads(Exception):
    """Student threads that never finished (a deadlock, a thread left running, the case's time): raised
    by the threads runtime's harness, the case's ``hang`` verdict with this message."""


#: The runtimes this grader has.
AVAILABLE = frozenset({"torchdist", "threads"})


def require(runtime: str, pack: str) -> None:
    """A pack that needs a runtime this grader does not have is the user's error, said at once."""
    from grader.errors import UserError  # here: every rank imports this package, and holds only its runtime

    if runtime not in AVAILABLE:
        have = ", ".join(sorted(AVAILABLE))
        raise UserError(f"the assignment pack {pack!r} runs on the {runtime!r} runtime; this grader has: {have}")
