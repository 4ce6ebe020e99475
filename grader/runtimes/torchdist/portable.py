"""Session side of the portable runtime: rank groups on any OS, where the Linux sandbox cannot be built
(``mode.decide`` chooses it).

A ``portable_group.PortableGroup`` has the interface of ``launcher.RankGroup`` (start, run_case, close),
so the matrix session treats both alike: one live group per number of rank processes across many
cases, torn down after any case that leaves the wire in doubt.  Its ranks (``portable_rank``) are
started with ``multiprocessing`` in a scrubbed environment (``mode.start_method``), join a Gloo
group through a ``FileStore`` (no port is guessed; a file works on every OS) over loopback, and are
sent only inputs; the session decides every verdict.  What it cannot do without Linux: measure the wire, see
/proc, confine the ranks.  So the messages and bytes are the ranks' own records, a hang is found by
the case's time budget (and by the ranks' own account for a deadlock), and a rank that does not
answer its watchdog is a ``hang`` without a line.  Every such layer is reported off, with the
``runtime`` layer saying the run is advisory (``mode.Isolation.layers``).

This module imports no torch (the groups, which do, are ``portable_group``'s): the session starts
its :class:`WorkerPool` first, so that the workers' torch imports overlap its own.  The pool knows
of a group only what it evicts (:class:`Tenant`), so the two modules do not import each other.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import multiprocessing.resource_tracker
import os
import signal
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from grader.runtimes import RankSide
from grader.runtimes.torchdist.portable_rank import LOOPBACK, WorkerSetup, main
from grader.runtimes.torchdist.zygote import NUMERICS_ENV, STATUS, WorkerRequest

if TYPE_CHECKING:
    from grader.pack import Case
    from grader.runtimes.torchdist.session import Zygote

#: Environment a spawned rank keeps: what Python and the OS need to start, nothing of the grader's.
KEEP_ENV = ("PATH", "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "TEMP", "TMP", "LANG", "LC_ALL", "PATHEXT", "COMSPEC")
SPAWN_S = 90.0  # added to a group's start budget while a worker still imports torch (a loaded laptop)


def worker_environment(environ: dict[str, str]) -> dict[str, str]:
    """All of ``environ`` that a spawned worker starts with: what Python and the OS need, nothing of the
    grader's (never the session's config path, let alone a salt).  A session host that spawns workers
    ahead (``grader.matrix.host``) starts with it too."""
    env = {k: v for k, v in environ.items() if k.upper() in KEEP_ENV}
    env.update({**NUMERICS_ENV, "PYTHONNOUSERSITE": "1"})
    if sys.platform in LOOPBACK:
        env["GLOO_SOCKET_IFNAME"] = LOOPBACK[sys.platform]
    if sys.platform == "win32":
        env["USE_LIBUV"] = "1"  # the libuv TCP transport, as the course's handout runs it on Windows
    return env


@contextlib.contextmanager
def _scrubbed_environment() -> Any:
    """A spawned worker gets this process's environment: for the time it starts, only
    :func:`worker_environment`'s."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(worker_environment(saved))
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


#: Workers a session host spawned before its grading (:func:`spawn_ahead`), for its session's pool.
_AHEAD: list[Worker] = []


def spawn_ahead(side: RankSide, n: int) -> None:
    """Spawn ``n`` workers for the pack of ``side`` now, in a session host not yet told its grading (a
    spare's, ``grader.matrix.host``): they import torch and the rank side while the student reads the
    last grade, and are told the grading's sandbox and student settings only once its pool takes them.
    A host that is closed unused takes them with it (their channels close)."""
    with _scrubbed_environment():
        _AHEAD.extend(_spawned(side) for _ in range(n))


class ForkedProcess:
    """A worker the session's zygote forked (``zygote.worker``), with the part of ``multiprocessing.
    Process``'s interface the pool and its groups use.  Its waiter writes the worker's pid, then its
    exit status, to a pipe whose read end is the sentinel (as ``multiprocessing``'s fork server reports
    on the workers it forks)."""

    def __init__(self, sentinel: int) -> None:
        self.sentinel = sentinel
        self.exitcode: int | None = None
        pid = self._read()
        if pid is None:
            os.close(sentinel)
            raise OSError("the zygote's waiter ended before it forked the worker")
        self.pid = pid

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is None and multiprocessing.connection.wait([self.sentinel], timeout):
            code = self._read()
            self.exitcode = -signal.SIGKILL if code is None else code  # no word: its waiter was killed

    def kill(self) -> None:
        if self.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        """Once it is of no more use: the sentinel is no longer waited on."""
        os.close(self.sentinel)

    def _read(self) -> int | None:
        data = b""
        while len(data) < STATUS.size:
            chunk = os.read(self.sentinel, STATUS.size - len(data))
            if not chunk:
                return None
            data += chunk
        value: int = STATUS.unpack(data)[0]
        return value


@dataclass
class Worker:
    """One worker process and the session's ends of its connections."""

    process: Any  # multiprocessing's SpawnProcess, or a ForkedProcess
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
        if isinstance(self.process, ForkedProcess):  # multiprocessing's close their own when collected
            self.process.close()


class Tenant(Protocol):
    """What the pool knows of a group holding its workers: how many it holds, and how to end it (its
    workers then come back through :meth:`WorkerPool.give_back`)."""

    ranks: list[Worker]

    def close(self) -> None: ...


class WorkerPool:
    """The session's rank processes.  A worker whose group ended clean (the condition under which a
    forked group serves its next case) joins the next group instead of dying, and at most ``capacity``
    workers live at once (:func:`pool_capacity`): a group that needs more takes them from the least
    recently used idle groups (a bound a laptop's memory needs, too).

    Where the session's host forked a zygote (Linux, ``grader.matrix.host``), the zygote forks each
    worker when a group first needs it (``method`` "zygote"): it imported torch and the pack's rank side
    before the host was told anything, so a host forked warm (``grader.matrix.warm``) starts its workers
    without any import.  Elsewhere (macOS, Windows: ``mode.start_method``) they are spawned, all at once,
    so that their torch imports overlap the session's own, and first taken from those its host spawned
    before it was told the grading (:func:`spawn_ahead`)."""

    def __init__(
        self,
        capacity: int,
        sandbox: Path,
        side: RankSide,
        student: dict[str, Any],
        zygote: Zygote | None = None,
    ):
        self.capacity = capacity
        self.setup = WorkerSetup(str(sandbox), side, student)
        self.zygote = zygote  # the pool's to close
        self.method = "zygote" if zygote is not None else "spawn"
        self.idle: list[Worker] = []
        self.groups: list[Tenant] = []  # live groups, least recently used first
        self.spawned = 0  # workers started over the session
        self.ahead = 0  # of them, workers its host spawned before the grading (spawn_ahead)
        if zygote is None:
            self.idle = [self._told(worker) for worker in _AHEAD[:capacity]]
            for extra in _AHEAD[capacity:]:
                extra.kill()
            _AHEAD.clear()
            self.ahead = self.spawned = len(self.idle)
            with _scrubbed_environment():
                self.idle += [self._spawn() for _ in range(capacity - len(self.idle))]

    def take(self, n: int, group: Tenant) -> list[Worker]:
        """``n`` workers for ``group``: idle ones first, then new ones, evicting idle groups for room."""
        for worker in [w for w in self.idle if not w.process.is_alive()]:
            self.idle.remove(worker)
            worker.kill()  # its connections closed, and the zygote's waiter's pipe
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

    def used(self, group: Tenant) -> None:
        """``group`` ran a case: it is the most recently used."""
        if group in self.groups:
            self.groups.remove(group)
            self.groups.append(group)

    def give_back(self, group: Tenant, workers: list[Worker], reusable: bool) -> None:
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
        if self.zygote is not None:
            self.zygote.close()
        else:
            _stop_resource_tracker()

    def _spawn(self) -> Worker:
        self.spawned += 1
        if self.zygote is not None:
            return self._forked(self.zygote)
        return _spawned(self.setup)

    def _told(self, worker: Worker) -> Worker:
        """A worker spawned ahead, told the rest of its setup (:func:`spawn_ahead`).  One that died
        meanwhile (its channel is closed) is found dead by :meth:`take` and replaced there."""
        told = {"sandbox": self.setup.sandbox, "student": self.setup.student}
        with contextlib.suppress(OSError):
            worker.channel.send_bytes(json.dumps(told).encode())
        return worker

    def _forked(self, zygote: Zygote) -> Worker:
        """A worker the zygote forks: it sends the worker's ends of the connections, and the write end
        of the pipe its waiter reports on, and keeps the rest."""
        channel, theirs = multiprocessing.Pipe(duplex=True)
        out_r, out_w = multiprocessing.Pipe(duplex=False)
        watch, their_watch = multiprocessing.Pipe(duplex=True)
        status_r, status_w = os.pipe()
        try:
            ends = [theirs.fileno(), out_w.fileno(), their_watch.fileno(), status_w]
            zygote.leader(zygote.ask(WorkerRequest(self.setup.to_json()), ends))  # forked once answered
        except BaseException:
            for conn in (channel, out_r, watch):
                conn.close()
            os.close(status_r)
            raise
        finally:
            for end in (theirs, out_w, their_watch):
                end.close()
            os.close(status_w)
        return Worker(ForkedProcess(status_r), channel, out_r, watch, fresh=False)


def _spawned(setup: WorkerSetup | RankSide) -> Worker:
    """A fresh interpreter running :func:`portable_rank.main` on ``setup`` (a rank side alone: it waits
    for the rest, :func:`spawn_ahead`)."""
    ctx = multiprocessing.get_context("spawn")
    channel, theirs = ctx.Pipe(duplex=True)
    out_r, out_w = ctx.Pipe(duplex=False)
    watch, their_watch = ctx.Pipe(duplex=True)
    process = ctx.Process(target=main, args=(setup, theirs, out_w, their_watch), daemon=True)
    process.start()
    for end in (theirs, out_w, their_watch):
        end.close()
    return Worker(process, channel, out_r, watch)


def _stop_resource_tracker() -> None:
    """Spawning starts ``multiprocessing``'s resource tracker, which ends by itself only once the session
    has.  A grading leaves no process behind, so it ends here.  CPython has no public way to stop it;
    ``_stop`` is what its own tests use."""
    stop = getattr(multiprocessing.resource_tracker._resource_tracker, "_stop", None)  # not in every Python
    if stop is not None:
        stop()


def pool_capacity(cases: Iterable[Case], skip: Collection[str], handoffs: Collection[str], forked: bool) -> int:
    """Workers alive at once, counting only the cases that will run (a student's ``-k`` run of small
    cases starts only those).  A regroup costs a Gloo rendezvous and the student's modules imported
    again (A9 alternates world sizes: 83 of them).  Forked by the zygote a worker is cheap, so
    every group the cases need keeps its own, as in the full sandbox: one per world size, and one of
    fresh ranks per world size where a kind hands off (``AssignmentPack.handoffs``).  Spawned, each
    costs a torch import (about 1.5 s of CPU), so only as many as the largest group has ranks."""
    running = [case for case in cases if case.name not in skip]
    if not forked:
        return max((case.processes for case in running), default=1)
    groups = {key for case in running for key in case.rank_groups(handoffs)}
    return max(sum(size for _, size in groups), 1)
