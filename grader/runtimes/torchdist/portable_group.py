"""A rank group of the portable runtime (``portable``): ``launcher.RankGroup``'s interface, with ranks
taken from the session's ``WorkerPool`` of spawned workers (``portable_rank``).

Apart from ``portable`` because it needs torch and the pool does not: the session starts its workers
(each a torch import of seconds) before it imports torch itself, so that the imports overlap.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing.connection
import shutil
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch

from grader import tempdirs
from grader.limits import Limits
from grader.runtimes.torchdist import deadlock, replies
from grader.runtimes.torchdist.portable import SPAWN_S, Worker, WorkerPool
from grader.runtimes.torchdist.runs import (
    FAILURE_GRACE_S,
    STACK_WAIT_S,
    CappedOutput,
    CaseRun,
    GroupLifecycle,
    GroupStartError,
    RankReport,
    case_frames,
    clean,
)
from grader.sandbox import wire
from grader.sandbox.status import StatusSlot


class PortableGroup(GroupLifecycle):
    """A group of spawned ranks: ``launcher.RankGroup``'s interface, without the Linux sandbox."""

    def __init__(self, world_size: int, limits: Limits, pool: WorkerPool) -> None:
        self.world_size = world_size
        self.limits = limits
        self.pool = pool
        self.layers: dict[str, str] = {}
        self.alive = False
        self.ranks: list[Worker] = []
        self._ready_layers: dict[int, dict[str, str]] = {}  # what each rank's ready frame reports
        self._dir, self._dir_lock = tempdirs.make(f"grader-ws{world_size}-")  # swept once this process is dead

    def launch(self) -> None:
        """Nothing ahead of time: every group takes its ranks from the one pool (``RankGroup.launch``)."""

    def wait_ready(self) -> None:
        self.start()

    def start(self) -> None:
        self.ranks = self.pool.take(self.world_size, self)
        self.alive = True
        fresh = any(rk.fresh for rk in self.ranks)
        joins = [
            wire.encode(
                {
                    "op": "join",
                    "rank": r,
                    "world_size": self.world_size,
                    "store": str(self._dir / "store"),
                    "scratch": str(self._dir / f"rank{r}"),
                }
            )
            for r in range(self.world_size)
        ]
        run = self._exchange(joins, self.limits.start_timeout_s + (SPAWN_S if fresh else 0), expect="ready")
        if any(rep.status != "ready" for rep in run.ranks):
            self.close(reusable=False)
            raise GroupStartError.not_ready(run)
        for layers in self._ready_layers.values():
            self.layers.update(layers)

    def kill(self) -> None:
        """Nothing to signal: ``close`` gives the workers back to the pool (``RankGroup.kill``)."""

    def close(self, reusable: bool = True) -> None:
        """End the group: its workers go back to the pool when it ended clean (every case so far was
        clean, or it would already be closed), else they are killed (a spawned rank has no init to
        take its children: they are its own business, and the process is killed)."""
        if self.alive:
            self.pool.give_back(self, self.ranks, reusable)
        self.ranks = []
        self.alive = False
        shutil.rmtree(self._dir, ignore_errors=True)

    def run_case(self, header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], timeout_s: float) -> CaseRun:
        frames = case_frames(header, inputs, self.world_size)
        self.pool.used(self)
        run = self._exchange(frames, timeout_s, expect="case")
        if not clean(run):
            self.close(reusable=False)
        return run

    def _exchange(self, frames: Sequence[bytes | bytearray], timeout_s: float, expect: str) -> CaseRun:
        """Send each rank its frame and collect one reply per rank (``expect``: "ready" or "case"), or stop."""
        t0 = time.monotonic()
        n = self.world_size
        for rk, frame in zip(self.ranks, frames, strict=True):
            # a thread per rank: a rank that never reads must not block the session
            threading.Thread(target=_send, args=(rk.channel, frame), daemon=True).start()
        limit = (self.limits.max_result_mb << 20) + wire.MAX_HEADER_BYTES + 1024
        reports: list[RankReport | None] = [None] * n
        output = CappedOutput(self.limits.output_kb << 10)
        hang, failed_at = "", None
        last_poll, previous = t0, None
        while any(rep is None for rep in reports):
            waiting = [r for r in range(n) if reports[r] is None]
            objects = [rk.output for rk in self.ranks] + [self.ranks[r].channel for r in waiting]
            objects += [self.ranks[r].process.sentinel for r in waiting]
            ready = multiprocessing.connection.wait(objects, timeout=0.02)
            for r, rk in enumerate(self.ranks):
                if rk.output in ready:
                    output.feed(r, _drain(rk.output))
            for r in waiting:
                rk = self.ranks[r]
                if rk.channel in ready or rk.process.sentinel in ready:
                    reports[r] = self._reply(r, limit, expect)
            now = time.monotonic()
            if failed_at is None and any(rep is not None and rep.status not in ("ok", "ready") for rep in reports):
                failed_at = now
            if failed_at is not None and now - failed_at > FAILURE_GRACE_S:
                break
            if now - t0 > timeout_s:
                hang = "timeout"
                break
            waiting = [r for r in range(n) if reports[r] is None]
            if expect == "case" and waiting and now - last_poll > deadlock.WATCHDOG_POLL_S:
                last_poll = now
                where = self._where(waiting, with_stack=False)
                previous, hang = deadlock.by_watchdogs(where, previous, now, self.limits.deadlock_after_s)
                if hang:
                    break
        unfinished = [r for r in range(n) if reports[r] is None]
        where = self._where(unfinished, with_stack=True) if unfinished else {}
        elapsed = time.monotonic() - t0
        final = []
        for r in range(n):
            rep = reports[r]
            if rep is None:
                rep = RankReport(r, "hang" if hang else "no_reply")
                answer = where.get(r)
                if answer is not None:  # no answer: a hang without a line
                    state, text = answer.get("state"), str(answer.get("text", ""))[:256]
                    rep.blocked_in = text if state in (StatusSlot.BLOCKED, StatusSlot.IMPORTING) else ""
                    rep.stack = str(answer.get("stack", ""))
                    cpu = answer.get("cpu_s")
                    if isinstance(cpu, int | float) and elapsed > 0:
                        rep.cpu_percent = round(100 * cpu / elapsed)
            final.append(rep)
        for r, rk in enumerate(self.ranks):
            output.feed(r, _drain(rk.output))
        return CaseRun(final, time.monotonic() - t0, hang, output.text(), output.truncated)

    def _reply(self, r: int, limit: int, expect: str) -> RankReport:
        """The rank's reply frame, or how it ended when its channel closed without one."""
        rk = self.ranks[r]
        try:
            if rk.channel.poll():
                data = rk.channel.recv_bytes(limit)
                got = wire.FrameReader(limit).feed(data)
                if not got:
                    raise wire.WireError("an incomplete frame")
                reply = replies.parse(got[0].header, self.world_size)
                rep = RankReport(r, reply.status, reply.message, got[0].tensors, reply.claims, replied=True)
                if expect == "ready":
                    self._ready_layers[r] = dict(reply.layers)
                return rep
        except wire.WireError as exc:
            return RankReport(r, "wire_error", f"rank {r} sent a malformed reply: {exc}")
        except (EOFError, OSError):
            pass  # its end closed: how it ended is the process's exit status
        rk.process.join(1.0)
        code = rk.process.exitcode
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return RankReport(r, "signaled", f"rank {r} was killed by {signal.Signals(-code).name}")
        return RankReport(r, "exited", f"rank {r} exited with status {code} during the case")

    def _where(self, ranks: list[int], with_stack: bool) -> dict[int, dict[str, Any]]:
        """Each rank's watchdog answer (its status, CPU seconds of the case, stacks), within STACK_WAIT_S."""
        asked = {}
        for r in ranks:
            with contextlib.suppress(OSError):
                self.ranks[r].watch.send_bytes(b"stack" if with_stack else b"where")
                asked[self.ranks[r].watch] = r
        answers: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + STACK_WAIT_S
        while asked and time.monotonic() < deadline:
            for conn in multiprocessing.connection.wait(list(asked), timeout=0.05):
                r = asked.pop(conn)
                try:
                    answer = json.loads(conn.recv_bytes(1 << 17))  # type: ignore[union-attr]
                except (EOFError, OSError, ValueError):
                    continue
                if isinstance(answer, dict):
                    answers[r] = answer
        return answers


def _send(conn: Any, frame: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        conn.send_bytes(frame)


def _drain(conn: Any) -> bytes:
    chunks, total = [], 0
    with contextlib.suppress(EOFError, OSError):
        while total < 4 << 20 and conn.poll():
            chunk = conn.recv_bytes(1 << 20)
            chunks.append(chunk)
            total += len(chunk)
    return b"".join(chunks)
