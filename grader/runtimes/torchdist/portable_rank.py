"""Rank side of the portable runtime: one rank, forked by the session's zygote or spawned.

Where the Linux sandbox cannot be built (no namespaces or ``/proc`` on macOS and Windows, no
``fork`` on Windows), a rank is a process the session starts (``mode.start_method``: forked from
the zygote of the session's host on Linux, which imported torch before the host was told anything,
spawned by ``multiprocessing`` as a fresh interpreter elsewhere), in a scrubbed environment (no salt,
no config path), and talks to the session over three ``multiprocessing`` connections, which work on
every OS:

``channel``   session -> rank ``join`` and case frames, rank -> session replies (``grader.sandbox.wire``)
``output``    the rank's stdout and stderr: file descriptors 1 and 2 are a pipe a thread forwards
``watch``     the watchdog: asked "where", it answers what the rank says it is doing (the guard's
              status) and the CPU seconds of the current case; asked "stack", a faulthandler dump
              of every thread too.  When the session's end closes, the rank exits.

A worker is not bound to one group: a ``join`` frame names its rank, world size and FileStore, and a
worker whose group ended clean leaves it and joins the next (``portable.WorkerPool``), its student
modules forgotten first, so that a torch import is paid once per worker, not once per rank of a group.

It never holds an expected value or the salt: a case frame carries only inputs, and the verdict is
decided by the session, as in the full runtime (the case loop itself is ``rank``'s).  What differs
is what the session can observe from outside: no packet capture, no /proc, no init; so the
communication facts in portable mode are the ranks' own records, and the run is advisory.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any

from grader.runtimes import RankSide
from grader.sandbox.status import StatusSlot

#: The loopback interface Gloo is told to use, by platform (Windows: Gloo's libuv transport picks it).
LOOPBACK = {"linux": "lo", "darwin": "lo0"}
MAX_CONTROL_FRAME = 1 << 30
WATCH_STACK_BYTES = 1 << 16


@dataclass(frozen=True)
class WorkerSetup:
    """What a spawned rank is told once (pickled by ``multiprocessing``: plain data only).  Which
    group it joins, with which rank, comes later in a ``join`` frame: a worker whose group ended
    clean serves the next group (see ``portable.WorkerPool``)."""

    sandbox: str
    side: RankSide  # what the pack's ranks import
    student: dict[str, Any]  # rank.StudentConfig fields

    def to_json(self) -> dict[str, Any]:
        """As the session's zygote is told it (``zygote.WorkerRequest``)."""
        return {"sandbox": self.sandbox, "side": self.side.to_json(), "student": self.student}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerSetup:
        return cls(str(data["sandbox"]), RankSide.from_json(data["side"]), dict(data["student"]))


class WatchedStatus:
    """The guard's status (``StatusSlot``'s interface), kept in the rank for the watchdog to read."""

    def __init__(self) -> None:
        self.state, self.seq, self.text = StatusSlot.IDLE, 0, ""
        self.case_cpu = time.process_time()

    def set(self, state: int, text: str) -> None:
        self.state, self.seq, self.text = state, self.seq + 1, text

    def get(self) -> tuple[int, int, str]:
        return self.state, self.seq, self.text


def main(setup: WorkerSetup | RankSide, channel: Any, output: Any, watch: Any) -> None:
    """The spawned rank's entry point (``multiprocessing`` calls it).  Ends with ``os._exit``: the
    exit status says nothing but "it ended".  A worker spawned ahead of its grading (by a spare
    session host, ``portable.spawn_ahead``) is given only the pack's rank side: it imports what every
    rank does, then waits for the rest of its setup, the grading's sandbox and student settings, as the
    first message on its channel (``portable.WorkerPool``)."""
    code = 1
    try:
        _redirect_output(output)
        side = setup if isinstance(setup, RankSide) else setup.side
        _preload(side)
        if isinstance(setup, RankSide):
            told = json.loads(channel.recv_bytes(MAX_CONTROL_FRAME))
            setup = WorkerSetup(str(told["sandbox"]), side, dict(told["student"]))
        _serve(setup, channel, watch)
        code = 0
    except BaseException:  # reported on the rank's output; the session sees only that it ended
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def forked_main(setup: dict[str, Any], channel: int, output: int, watch: int) -> None:
    """A worker the session's zygote forked (``zygote.worker``): :func:`main` on the descriptors the
    session sent it, the ends of the connections ``portable.WorkerPool`` made."""
    from multiprocessing.connection import Connection

    main(WorkerSetup.from_json(setup), Connection(channel), Connection(output, readable=False), Connection(watch))


def _redirect_output(output: Any) -> None:
    """Descriptors 1 and 2 (C code's output too) become a pipe that a thread forwards to the session."""
    read, write = os.pipe()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115

    def forward() -> None:
        while True:
            chunk = os.read(read, 1 << 16)
            if not chunk:
                return
            try:
                output.send_bytes(chunk)
            except OSError:
                return

    threading.Thread(target=forward, daemon=True, name="grader-output").start()


def _watchdog(watch: Any, status: WatchedStatus, dump: Any) -> None:
    """Answers the session's "where" while the student's thread runs (or hangs); ends the process when
    the session's end closes (the portable stand-in for PDEATHSIG)."""
    while True:
        try:
            request = watch.recv_bytes(64)
        except (EOFError, OSError):
            os._exit(1)  # the session is gone (on any OS): so is this rank, whatever its student thread does
        state, seq, text = status.get()
        answer = {"state": state, "seq": seq, "text": text[:256], "cpu_s": time.process_time() - status.case_cpu}
        if request == b"stack":  # the case is over: where every thread is, for the hang's message
            dump.seek(0)
            dump.truncate()
            faulthandler.dump_traceback(file=dump, all_threads=True)
            dump.flush()
            dump.seek(0)
            answer["stack"] = dump.read(WATCH_STACK_BYTES).decode("utf-8", "replace")
        try:
            watch.send_bytes(json.dumps(answer).encode())
        except OSError:
            return


def _preload(side: RankSide) -> None:
    """What every rank of the pack imports before any grading: torch, the runtime's and the pack's rank
    side, and the guard's and audit hook's tables."""
    sys.path[:0] = list(side.path)
    import importlib

    import torch
    import torch.distributed  # imported here, where the worker waits; _serve uses it

    torch.set_num_threads(1)
    for module in side.modules:  # the runtime's, then the pack's bodies
        importlib.import_module(module)
    from grader.runtimes.torchdist import rank
    from grader.sandbox import audit

    audit.preload(side.bodies)
    rank.preload()


def _serve(setup: WorkerSetup, channel: Any, watch: Any) -> None:
    import torch.distributed as dist

    bodies = sys.modules[setup.side.bodies]
    from grader.runtimes.torchdist import guard, rank
    from grader.sandbox import audit, wire

    status = WatchedStatus()
    dump = tempfile.TemporaryFile()  # noqa: SIM115 - the watchdog's, for the process's life
    threading.Thread(target=_watchdog, args=(watch, status, dump), daemon=True, name="grader-watchdog").start()
    student_cfg = rank.StudentConfig(**setup.student)
    rank_guard: guard.Guard | None = None
    layers: dict[str, str] = {}
    cases = rank._StudentThread()  # the same one thread student code runs on as in the full runtime
    reader = wire.FrameReader(max_bytes=MAX_CONTROL_FRAME)
    student = case_setup = None
    while True:
        try:
            frames = reader.feed(channel.recv_bytes())
        except (EOFError, OSError):
            return  # the session closed the channel: this worker is done
        op = frames[0].header.get("op") if frames else None
        if op == "join":
            head = frames[0].header
            _join(head, dist, setup.sandbox)
            if rank_guard is None:  # once per process, before any student code
                rank_guard = guard.install(int(head["rank"]), setup.sandbox, status.set, student_cfg)
                layers["audit_hooks"] = audit.install()
                sys.path.append(setup.sandbox)  # appended: the student's package never shadows site-packages
            rank_guard.rank = int(head["rank"])
            student = rank.Student(setup.sandbox, status, student_cfg, rank_guard.stand_ins)  # type: ignore[arg-type]
            r, ws, store = int(head["rank"]), int(head["world_size"]), str(head["store"])
            case_setup = rank.RankSetup(r, ws, store, setup.sandbox, (), None, bodies, student_cfg)
            channel.send_bytes(wire.encode({"status": "ready", "isolation": layers, "connections": []}))
            continue
        if op not in ("case", "calibrate") or rank_guard is None:
            return
        frame = frames[0]
        status.case_cpu = time.process_time()
        status.set(StatusSlot.RUNNING, "")
        if op == "calibrate":
            reply = rank._calibrate(frame, rank_guard)
        else:
            reply = cases.run(rank._run_case, frame, student, rank_guard, case_setup)
        status.set(StatusSlot.DONE, "")
        channel.send_bytes(reply)


def _join(head: dict[str, Any], dist: Any, sandbox: str) -> None:
    """Leave the group this worker served (its case ended clean, or it would have been killed) and
    forget the student's modules, so that the new group imports them afresh, as a forked rank would;
    then join the new group through its FileStore."""
    if dist.is_initialized():
        dist.destroy_process_group()
        _forget_student_modules(sandbox)
    scratch = str(head["scratch"])
    os.makedirs(scratch, exist_ok=True)
    os.chdir(scratch)
    os.environ.update({"TMPDIR": scratch, "HOME": scratch})
    tempfile.tempdir = None
    ws = int(head["world_size"])
    dist.init_process_group(
        "gloo",
        store=dist.FileStore(str(head["store"]), ws),
        rank=int(head["rank"]),
        world_size=ws,
        timeout=datetime.timedelta(seconds=120),
    )


def _forget_student_modules(sandbox: str) -> None:
    """Every module of the submission (by its top-level name in the sandbox), placeholders included."""
    tops = {name.split(".")[0] for name in os.listdir(sandbox)}
    for name in list(sys.modules):
        if name.split(".")[0] in tops:
            del sys.modules[name]
