"""What one case's run of a rank group returned, as the session observed it, whether the group may
run another case, and how a group that did not start fails: shared by every launcher of the
torch.distributed runtime (forked or portable)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import torch

from grader.runtimes.torchdist.replies import Claims
from grader.runtimes.torchdist.traffic import Traffic
from grader.sandbox import wire

G = TypeVar("G", bound="GroupLifecycle")

STACK_WAIT_S = 1.0  # a spinning rank on a loaded machine can take a while to be scheduled and dump
FAILURE_GRACE_S = 0.3  # after one rank failed, for the others' replies (their own account of the case)
READ_BYTES = 1 << 18  # one read of a rank's pipe: the pipe's size (``launcher.PIPE_BYTES``)


@dataclass
class RankReport:
    """What one rank did in one case, as the session observed it."""

    rank: int
    status: str  # a reply's status, or "exited" / "signaled" / "hang" / "wire_error" / "no_reply"
    message: str = ""
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    claims: Claims = field(default_factory=Claims)
    replied: bool = False  # its reply arrived and parsed: its claims are its own account
    blocked_in: str = ""  # the status slot's text when the case was stopped
    stack: str = ""  # faulthandler dump, student frames first
    cpu_percent: int | None = None  # of one CPU, over the case, for a rank that never replied (from /proc)
    threads: tuple[str, ...] = ()  # the threads it says it left running: the group ends with the case


@dataclass
class CaseRun:
    ranks: list[RankReport]
    seconds: float
    hang: str = ""  # "" | "deadlock" | "timeout"
    output: str = ""  # captured stdout/stderr of all ranks, capped
    output_truncated: bool = False
    traffic: Traffic | None = None  # measured; None where the group has no capture
    memory_kills: list[int] = field(default_factory=list)  # ranks the kernel killed for memory
    #: rank -> what its memory cgroup recorded when the rank reached its limit during the case
    memory_pressure: dict[int, str] = field(default_factory=dict)
    threads_left: dict[int, int] = field(default_factory=dict)  # rank -> threads beyond its own, after the case
    runs: int = 1  # how often the case ran before its traffic was measured (or the session gave up)


class GroupStartError(Exception):
    """A group that did not start.  The grader's failure while no student code has run in the session;
    after that the session charges it to the submission (``MatrixSession._start_failure``)."""

    def __init__(self, reason: str, run: CaseRun | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.run = run

    @classmethod
    def not_ready(cls, run: CaseRun) -> GroupStartError:
        """The ranks' start ``run`` had some not ready: the first three say why, with the output's last lines."""
        failed = [rep for rep in run.ranks if rep.status != "ready"]
        reason = "; ".join(f"rank {rep.rank}: {rep.message or rep.status}" for rep in failed[:3])
        tail = run.output.splitlines()[-5:]
        return cls(reason + ("\n" + "\n".join(tail) if tail else ""), run)


#: Reply statuses after which a rank process is still sound: the failure was the student's Python
#: raising, not the process or the wire breaking.  "memory" is not among them (the heap may be spent).
REUSABLE = frozenset({"ok", "not_implemented", "forbidden", "import_error", "bad_return", "exception"})


def explains(ranks: list[RankReport], traffic: Traffic) -> bool:
    """Do the ranks' records account for every message measured (and, when every rank replied,
    does every recorded message show on the wire)?  Unexplained traffic is a ``tampering`` verdict."""
    return not beyond_the_records(ranks, traffic) and not short_of_the_records(ranks, traffic)


def short_of_the_records(ranks: list[RankReport], traffic: Traffic) -> bool:
    """Whether, every rank having replied, a message one of them recorded has not shown on the wire
    (yet: the one shortfall that more packets can make good)."""
    if not all(rep.replied for rep in ranks):
        return False
    for rep in ranks:
        for dst, count in rep.claims.sent_to.items():
            measured = traffic.pairs.get((rep.rank, dst))
            if dst >= 0 and (measured is None or measured.messages != count):
                return True
    return False


def beyond_the_records(ranks: list[RankReport], traffic: Traffic) -> bool:
    """Whether the traffic measured so far holds what no packet still to come can make the records
    explain: a lost or foreign packet, more messages or bytes than a replied rank recorded to a peer,
    or a built-in collective it never called.  Packets only add to these; a recorded message not seen
    yet is the one shortfall that waiting can make good (``launcher.RankGroup._measured``)."""
    if traffic.foreign or traffic.lost:
        return True
    by_rank = {rep.rank: rep for rep in ranks}
    for (src, dst), pair in traffic.pairs.items():
        rep = by_rank.get(src)
        if rep is None or not rep.replied:
            continue  # a rank that died left no records: its traffic is judged by its crash
        claimed = (rep.claims.sent_to.get(dst, 0), rep.claims.sent_bytes_to.get(dst, 0))
        if pair.messages > claimed[0] or pair.bytes > claimed[1]:
            return True
        if any(name not in rep.claims.collectives for name in pair.collectives):
            return True
    return False


def clean(run: CaseRun) -> bool:
    """May the group run another case?  Only if every rank replied, none broke or left a thread of its
    own running, every message recorded pairs up, and the wire shows exactly what the records say
    (nothing left in flight)."""
    if (
        run.hang
        or run.memory_kills
        or run.threads_left
        or any(rep.status not in REUSABLE or rep.threads for rep in run.ranks)
    ):
        return False
    sent: dict[tuple[int, int], int] = {}
    received: dict[tuple[int, int], int] = {}
    for rep in run.ranks:
        for peer, count in rep.claims.sent_to.items():
            sent[(rep.rank, peer)] = count
        for peer, count in rep.claims.recv_from.items():
            received[(peer, rep.rank)] = count
    return sent == received and (run.traffic is None or explains(run.ranks, run.traffic))


class Group(Protocol):
    """Everything the matrix session does with a rank group, of either runtime (``launcher.RankGroup``,
    ``portable_group.PortableGroup``): launch it and wait until its ranks are ready (the session starts
    every group it will need side by side), run cases in it, and kill or close it."""

    world_size: int
    alive: bool  # launched and not yet killed or closed
    layers: dict[str, str]  # the isolation layers its ranks report, for results.json

    def launch(self) -> None: ...

    def wait_ready(self) -> None: ...

    def run_case(self, header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], timeout_s: float) -> CaseRun: ...

    def kill(self) -> None: ...

    def close(self) -> None: ...  # safe to call again: it finishes a close cut short


class GroupLifecycle:
    """What a rank group of either runtime (``launcher.RankGroup``, ``portable_group.PortableGroup``)
    promises a ``with`` block: started on entry, closed on the way out, whatever happened inside."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: G) -> G:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def case_frames(header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], world_size: int) -> list[bytearray]:
    """Each rank's frame of one case: the session's header, stamped with when it was sent (the ranks'
    records count time from it), and that rank's inputs."""
    stamped = {"op": "case", **header, "t0": time.monotonic()}
    return [wire.encode(stamped, inputs[r]) for r in range(world_size)]


class CappedOutput:
    """Every rank's captured stdout and stderr, kept up to ``cap`` bytes in all."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.parts: dict[int, bytearray] = {}
        self.kept = 0
        self.truncated = False

    def feed(self, rank: int, data: bytes) -> None:
        if not data:
            return
        room = self.cap - self.kept
        if len(data) > room:
            self.truncated = True
        data = data[: max(room, 0)]
        self.parts.setdefault(rank, bytearray()).extend(data)
        self.kept += len(data)

    def text(self) -> str:
        lines = [
            f"[rank {r}] {line}"
            for r, buf in sorted(self.parts.items())
            for line in bytes(buf).decode("utf-8", "replace").splitlines()
        ]
        return "\n".join(lines)


def drain(fd: int) -> bytes:
    """Read what is available (bounded per call so one chatty rank cannot starve the loop)."""
    chunks = []
    total = 0
    while total < 4 << 20:
        try:
            chunk = os.read(fd, READ_BYTES)
        except OSError:  # nothing more now (BlockingIOError, InterruptedError), or the end is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
