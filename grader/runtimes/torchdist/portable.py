"""Session side of the portable runtime: rank groups on any OS, where the Linux sandbox cannot be built.

Which runtime a grading uses is decided once per session (:func:`decide`): the full sandbox where
the process is root on Linux, the rootless one where unprivileged user namespaces work (see
``grader.sandbox.netns``), and this portable one where there is no ``os.fork``, the system is not
Linux, or no namespace can be made at all, or when ``--isolation portable`` asks for it.

A :class:`PortableGroup` has the interface of ``launcher.RankGroup`` (start, run_case, close), so
the matrix session treats both alike: one live group per world size across many cases, torn down
after any case that leaves the wire in doubt.  Its ranks (``portable_rank``) are started with
``multiprocessing``'s spawn context in a scrubbed environment, join a Gloo group through a
``FileStore`` (no port is guessed; a file works on every OS) over loopback, and are sent only
inputs; the session decides every verdict.  What it cannot do without Linux: measure the wire, see
/proc, confine the ranks.  So the messages and bytes are the ranks' own records, a hang is found by
the case's time budget (and by the ranks' own account for a deadlock), and a rank that does not
answer its watchdog is a ``hang`` without a line.  Every such layer is reported off, with the
``runtime`` layer saying the run is advisory.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader import tempdirs
from grader.limits import Limits
from grader.runtimes.torchdist import replies
from grader.runtimes.torchdist.launcher import FAILURE_GRACE_S, STACK_WAIT_S, GroupStartError
from grader.runtimes.torchdist.portable_rank import LOOPBACK, WorkerSetup, main
from grader.runtimes.torchdist.runs import CappedOutput, CaseRun, RankReport, clean
from grader.sandbox import wire
from grader.sandbox.status import StatusSlot

ADVISORY = "advisory; the instructor's run is the grade of record"
#: Environment a spawned rank keeps: what Python and the OS need to start, nothing of the grader's.
KEEP_ENV = ("PATH", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "TEMP", "TMP", "LANG", "LC_ALL", "PATHEXT", "COMSPEC")
DEADLOCK_POLL_S = 0.25
SPAWN_S = 90.0  # added to a group's start budget while a worker still imports torch (a loaded laptop)


@dataclass(frozen=True)
class Host:
    """What this machine offers the sandbox (every field can be faked in a test)."""

    system: str  # sys.platform
    fork: bool  # os.fork exists
    root: bool
    namespaces: str  # "" when unprivileged user namespaces work, else why not

    @classmethod
    def this(cls) -> Host:
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        if not sys.platform.startswith("linux") or not hasattr(os, "fork") or root:
            return cls(sys.platform, hasattr(os, "fork"), root, "" if root else "not Linux")
        from grader.sandbox.isolation import user_namespaces

        return cls(sys.platform, True, False, user_namespaces())


@dataclass(frozen=True)
class Mode:
    """The runtime a session uses: ``full`` (root), ``rootless`` (a user namespace) or ``portable``."""

    name: str
    why: str

    @property
    def portable(self) -> bool:
        return self.name == "portable"

    def layers(self) -> dict[str, str]:
        """What the session reports beside the groups' own layers."""
        if not self.portable:
            return {"runtime": f"on: {self.name} ({self.why})"}
        off = "off: portable runtime"
        return {
            "runtime": f"off: portable runtime ({self.why}): {ADVISORY}",
            "zygote": "on: every rank is a fresh interpreter (spawn) with a scrubbed environment",
            "pid_namespace": off,
            "cgroup": off,
            "measured_traffic": f"off: portable runtime: messages and bytes are the ranks' own records ({ADVISORY})",
            "rlimits": off,
            "fds": off,
            "nproc": off,
            "filesystem": off,
            "ipc": off,
            "uid": off,
            "prctl": off,
            "network": f"off: portable runtime: the ranks share the host's network ({self.why})",
            "seccomp": off,
        }


def decide(requested: str, host: Host | None = None) -> Mode:
    """The runtime for ``--isolation requested`` on ``host`` (this machine by default)."""
    if requested == "portable":
        return Mode("portable", "--isolation portable")
    host = host or Host.this()
    missing = ""
    if not host.fork:
        missing = "no os.fork on this platform"
    elif not host.system.startswith("linux"):
        missing = f"the Linux sandbox does not exist on {host.system}"
    elif not host.root and host.namespaces:
        missing = f"no namespaces: {host.namespaces}"
    if missing:
        if requested == "full":
            from grader.errors import UserError

            raise UserError(f"--isolation full: the Linux sandbox cannot be built here ({missing})")
        return Mode("portable", missing)
    return Mode("full", "root") if host.root else Mode("rootless", "an unprivileged user namespace")


@contextlib.contextmanager
def _scrubbed_environment() -> Any:
    """The spawn start method gives the child this process's environment: for the time it starts a
    rank, that is only what Python needs (never the session's config path, let alone a salt)."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update({k: v for k, v in saved.items() if k.upper() in KEEP_ENV})
        os.environ.update({"OMP_NUM_THREADS": "1", "PYTHONNOUSERSITE": "1"})
        if sys.platform in LOOPBACK:
            os.environ["GLOO_SOCKET_IFNAME"] = LOOPBACK[sys.platform]
        if sys.platform == "win32":
            os.environ["USE_LIBUV"] = "1"  # the libuv TCP transport, as the course's handout runs it on Windows
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@dataclass
class _Rank:
    """One spawned worker process and the session's ends of its connections."""

    process: Any  # multiprocessing's SpawnProcess
    channel: Any  # Connection: frames both ways
    output: Any  # Connection: the rank's stdout and stderr
    watch: Any  # Connection: the watchdog
    fresh: bool = True  # still importing torch: its first group may take longer to start

    def kill(self) -> None:
        for conn in (self.channel, self.output, self.watch):
            with contextlib.suppress(OSError):
                conn.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)


class WorkerPool:
    """The session's spawned rank processes.  Starting one costs a torch import (seconds), so a worker
    whose group ended clean (the condition under which a forked group serves its next case) joins the
    next group instead of dying, and at most ``capacity`` workers live at once: a group that needs
    more takes them from the least recently used idle groups (a bound a laptop's memory needs, too)."""

    def __init__(
        self, capacity: int, sandbox: Path, bodies: str, search_path: tuple[str, ...], student: dict[str, Any]
    ):
        self.capacity = capacity
        self.setup = WorkerSetup(str(sandbox), bodies, search_path, student)
        self.idle: list[_Rank] = []
        self.groups: list[PortableGroup] = []  # live groups, least recently used first
        self.spawned = 0  # workers started over the session (for the record: each is a torch import)
        with _scrubbed_environment():  # all at once, while the session is still starting
            self.idle = [self._spawn() for _ in range(capacity)]

    def take(self, n: int, group: PortableGroup) -> list[_Rank]:
        """``n`` workers for ``group``: idle ones first, then new ones, evicting idle groups for room."""
        self.idle = [w for w in self.idle if w.process.is_alive()]
        busy = sum(len(g.ranks) for g in self.groups)
        for other in list(self.groups):
            if len(self.idle) + max(self.capacity - busy - len(self.idle), 0) >= n:
                break
            busy -= len(other.ranks)
            other.close()  # its workers come back idle
        workers = self.idle[:n]
        self.idle = self.idle[n:]
        with _scrubbed_environment():
            workers += [self._spawn() for _ in range(n - len(workers))]
        self.groups.append(group)
        return workers

    def used(self, group: PortableGroup) -> None:
        """``group`` ran a case: it is the most recently used."""
        if group in self.groups:
            self.groups.remove(group)
            self.groups.append(group)

    def give_back(self, group: PortableGroup, workers: list[_Rank], reusable: bool) -> None:
        if group in self.groups:
            self.groups.remove(group)
        for worker in workers:
            if reusable and worker.process.is_alive():
                worker.fresh = False
                self.idle.append(worker)
            else:
                worker.kill()

    def close(self) -> None:
        for group in list(self.groups):
            group.close()
        for worker in self.idle:
            worker.kill()
        self.idle = []

    def _spawn(self) -> _Rank:
        ctx = multiprocessing.get_context("spawn")
        channel, theirs = ctx.Pipe(duplex=True)
        out_r, out_w = ctx.Pipe(duplex=False)
        watch, their_watch = ctx.Pipe(duplex=True)
        process = ctx.Process(target=main, args=(self.setup, theirs, out_w, their_watch), daemon=True)
        process.start()
        for end in (theirs, out_w, their_watch):
            end.close()
        self.spawned += 1
        return _Rank(process, channel, out_r, watch)


class PortableGroup:
    """A group of spawned ranks: ``launcher.RankGroup``'s interface, without the Linux sandbox."""

    def __init__(self, world_size: int, limits: Limits, pool: WorkerPool) -> None:
        self.world_size = world_size
        self.limits = limits
        self.pool = pool
        self.layers: dict[str, str] = {}
        self.alive = False
        self.ranks: list[_Rank] = []
        self._ready_layers: dict[int, dict[str, str]] = {}  # what each rank's ready frame reports
        self._dir, self._dir_lock = tempdirs.make(f"grader-ws{world_size}-")  # swept once this process is dead

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
            failed = [rep for rep in run.ranks if rep.status != "ready"]
            reason = "; ".join(f"rank {rep.rank}: {rep.message or rep.status}" for rep in failed[:3])
            tail = run.output.splitlines()[-5:]
            raise GroupStartError(reason + ("\n" + "\n".join(tail) if tail else ""), run)
        for layers in self._ready_layers.values():
            self.layers.update(layers)

    def close(self, reusable: bool = True) -> None:
        """End the group: its workers go back to the pool when it ended clean (every case so far was
        clean, or it would already be closed), else they are killed (a spawned rank has no init to
        take its children: they are its own business, and the process is killed)."""
        if self.alive:
            self.pool.give_back(self, self.ranks, reusable)
        self.ranks = []
        self.alive = False
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PortableGroup:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run_case(self, header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], timeout_s: float) -> CaseRun:
        header = {"op": "case", **header, "t0": time.monotonic()}
        frames = [wire.encode(header, inputs[r]) for r in range(self.world_size)]
        self.pool.used(self)
        run = self._exchange(frames, timeout_s, expect="case")
        if not clean(run):
            self.close(reusable=False)
        return run

    def _exchange(self, frames: list[bytes], timeout_s: float, expect: str) -> CaseRun:
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
            if expect == "case" and waiting and now - last_poll > DEADLOCK_POLL_S:
                last_poll = now
                where = self._where(waiting, with_stack=False)
                previous, hang = _deadlock(where, previous, now, self.limits.deadlock_after_s)
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


def _deadlock(
    where: dict[int, dict[str, Any]], previous: tuple[float, dict[int, Any]] | None, now: float, after_s: float
) -> tuple[tuple[float, dict[int, Any]] | None, str]:
    """Every unfinished rank answered, each blocked in communication with the same status as before,
    using under a tenth of the elapsed time in CPU, for ``after_s``: a deadlock by the ranks' own account."""
    blocked = {r: (a.get("seq"), a.get("cpu_s", 0.0)) for r, a in where.items() if a.get("state") == StatusSlot.BLOCKED}
    if not where or len(blocked) != len(where):
        return None, ""
    if previous is None or {r: s for r, (s, _) in blocked.items()} != {r: s for r, (s, _) in previous[1].items()}:
        return (now, blocked), ""
    since, before = previous
    cpu = sum(float(c) - float(before[r][1]) for r, (_, c) in blocked.items())
    if now - since > after_s and cpu < 0.1 * (now - since):
        return previous, "deadlock"
    return previous, ""


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


def pool_capacity(max_world_size: int) -> int:
    """Workers alive at once: as many as the largest group has ranks.  Each worker costs a torch import
    (about 1.6 s of CPU) and a regroup costs a Gloo rendezvous (about 50 ms), so a matrix that alternates
    world sizes is cheapest with the fewest workers (A9: 8 torch-loaded processes, not 36)."""
    return max_world_size
