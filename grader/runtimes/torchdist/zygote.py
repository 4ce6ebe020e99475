"""Rank side: the zygote every rank group is forked from.

Why a zygote: a rank forked from the matrix session would inherit everything the session holds
(the catalog, the expected values, the salt, the session's own frames).  The zygote is an
interpreter started with a scrubbed environment that imports torch, the rank runtime
(``grader.sandbox``) and one pack's rank-side bodies (:func:`preload`), and nothing else; forking
from it keeps the ~0.1 s group start of a torch-loaded parent without any of the session's memory.
A grading's zygote is forked by the session's host before the host is told anything and becomes
the session (``grader.matrix.host``), so the two share one torch import; ``python -I -m
grader.runtimes.torchdist.zygote`` starts one of its own (``grader bench``, tests).

The process tree of one group, all of it below the zygote::

    zygote                      one per matrix session; dies with the session (PDEATHSIG)
      leader                    one per group: joins the group's network namespace and cgroups,
        init                    pid 1 of a new PID namespace (root) or the leader itself (not root)
          rank 0 .. rank N-1    student code runs only here (see ``grader.runtimes.torchdist.rank``)

``init`` forks the ranks, reports each rank's end (exit status or signal) to the session on a
pipe, and reaps whatever the ranks leave behind.  With a PID namespace, ``kill(-1)`` and every
orphan stay inside it, and when the session kills the leader the kernel ends the whole namespace.
Without one (no root), init is a child subreaper that kills every descendant when it is told to
stop or its parent dies.

Protocol: the session sends one request per group on a ``SOCK_SEQPACKET`` socket: a JSON object
(see :class:`GroupRequest`) with the rank processes' descriptors attached (``SCM_RIGHTS``).  The
zygote answers ``{"leader": pid}``.  Nothing the zygote receives decides a grade: it is told where
the ranks' pipes are, never what a case expects.

The portable runtime's session, where its host forked a zygote (Linux), asks it for workers instead
(:class:`WorkerRequest`, answered alike): each is forked here rather than by a fork server that
imports torch for every grading, and a warm host's zygote has imported nothing a grading paid for::

    zygote
      waiter                    one per worker: writes the worker's pid, then its exit status
        worker                  ``portable_rank``: joins group after group of one session
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from typing import Any

from grader.runtimes import RANK_MODULES, RankSide
from grader.runtimes.torchdist import heap

MAX_REQUEST = 1 << 16
#: ``fd:pid`` of the session's end of the zygote's socket and of the zygote, as the session's host
#: (``grader.matrix.host``) leaves them for the session (``session.Zygote.forked``)
ZYGOTE_ENV = "GRADER_ZYGOTE"
MAX_FDS = 253  # SCM_RIGHTS' limit per message
FDS_PER_RANK = 5  # control (read end), result, output, stacks (write ends), status slot (memfd)


@dataclass(frozen=True)
class GroupRequest:
    """What the session asks for: one rank group.  Descriptors arrive alongside, in this order:
    ``FDS_PER_RANK`` per rank, then the init report pipe, then the network namespace (optional)."""

    world_size: int
    store: str  # the FileStore path of the group's Gloo rendezvous
    sandbox: str
    ranks: list[dict[str, Any]]  # per rank: scratch, uid, gid, cgroups (cgroup.procs paths to join)
    cgroups: list[str]  # cgroup.procs paths the whole group joins (pids)
    isolation: dict[str, Any] | None  # IsolationConfig fields common to the ranks; None: no layers
    pid_namespace: bool  # root: give the group its own PID namespace
    netns: bool  # a network namespace descriptor follows the report pipe
    student: dict[str, Any]  # how the pack's student code is laid out and judged (rank.StudentConfig)
    userns: bool = False  # rootless: the user namespace owning netns follows it; the leader joins it first


@dataclass(frozen=True)
class WorkerRequest:
    """What a portable session asks for: one worker (``portable_rank``), told what a spawned one is told
    (``portable_rank.WorkerSetup.to_json``).  Descriptors arrive alongside: the worker's ends of its
    channel, output and watch connections, then the write end of its status pipe (:func:`worker`)."""

    worker: dict[str, Any]


#: How a waiter writes the worker's pid and exit status (``multiprocessing``'s fork server writes its own so)
STATUS = struct.Struct("q")


def parse(data: bytes) -> GroupRequest | WorkerRequest:
    fields = json.loads(data)
    return WorkerRequest(**fields) if "worker" in fields else GroupRequest(**fields)


#: The environment of every process that computes a grade's numbers, the session's and the ranks':
#: one thread each, and MKL's results independent of where the data lies in memory.  Without that,
#: MKL's matrix products varied in their last bits with the alignment of their operands (12 of 84
#: products of the same values here), so with the heap's layout, run to run, and a result near a
#: tolerance could pass one grading and fail the next with the same salt ("strict conditional
#: numerical reproducibility", ``MKL_CBWR``; the same code path MKL would choose, 8% slower products).
#: One thread also keeps forking safe: a child forked after its parent ran a parallel operation on
#: GNU OpenMP's pool waits forever in its own first one (the pool's threads do not survive a fork).
#: The same holds for every machine a grading may meet (issue 38: a 16-core GPU node never finished HW12):
#: no GPU is visible, so no CUDA state exists before the zygote forks (``torch.cuda.is_available()``
#: asks the NVML, which reads the empty device list, never ``cuInit``, whose state a forked child cannot
#: use), the ranks compute on the CPU as everywhere else, and no pool is sized from the core count
#: (torch's inductor would fork up to 32 compile workers from whichever process reached it first).
NUMERICS_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_CBWR": "AUTO,STRICT",
    "CUDA_VISIBLE_DEVICES": "-1",  # not "": Windows drops a variable set empty; -1 ends the device list
    "HIP_VISIBLE_DEVICES": "-1",
    "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
}


def scrubbed_environment() -> dict[str, str]:
    """All of the environment a zygote starts with, whether as a process of its own or in the session's
    host (``grader.matrix.host``), which forks it before it learns anything."""
    path = os.environ.get("PATH", "/usr/bin:/bin")
    return {"PATH": path, "LANG": "C.UTF-8", "GLOO_SOCKET_IFNAME": "lo", **NUMERICS_ENV}


def main() -> None:
    """A zygote as a process of its own (``session.Zygote.start``: ``grader bench`` and tests); a
    grading's is forked by its session's host instead (``grader.matrix.host``)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--socket", type=int, required=True)
    parser.add_argument("--bodies", required=True, help="the pack's rank-side module, e.g. grader.packs.a9.bodies")
    parser.add_argument("--runtime", required=True, choices=sorted(RANK_MODULES), help="the pack's runtime")
    parser.add_argument("--path", action="append", default=[], help="where a pack that is not installed lives")
    args = parser.parse_args()
    from grader.sandbox.parent import die_with_parent

    die_with_parent(args.parent, signal.SIGKILL)
    side = RankSide(args.bodies, args.runtime, tuple(args.path))
    preload(side)
    serve(socket.socket(fileno=args.socket), side.bodies)


def preload_runtime() -> None:
    """The part of :func:`preload` no pack decides: torch and the rank runtime.  The session's host
    imports it before it is told the pack (``grader.matrix.host``)."""
    import torch
    import torch.distributed

    torch.set_num_threads(1)
    try:  # the inter-op pool's default size is the core count; settable once, before any use
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # set already (a test process preloads more than once) or in use: its size stays as it is
    from grader.runtimes.torchdist import rank

    rank.preload()


def preload(side: RankSide) -> None:
    """Everything a rank needs, imported once here so that forked ranks share it (copy on write)."""
    preload_runtime()
    preload_pack(side)


def preload_pack(side: RankSide) -> None:
    """The rest of :func:`preload`, once the runtime is: what the pack's runtime adds to a rank, then
    the pack's rank-side module, from where a pack that is not installed lives (``side.path``)."""
    sys.path[:0] = [p for p in side.path if p not in sys.path]
    for module in side.modules:
        importlib.import_module(module)
    from grader.sandbox import audit

    audit.preload(side.bodies)
    # Every object so far lives as long as the zygote: frozen, no rank's collection walks them and
    # copies the pages they are on (A9: 2.5% fewer page faults in its ranks, about 170 a rank).  Not
    # collected first: that walk of torch's whole heap took 90 ms, and what garbage it would free is small.
    gc.freeze()


def serve(sock: socket.socket, bodies: str) -> None:
    """Say the zygote is ready, then fork a group's leader per request until the session hangs up."""
    heap.keep_freed(heap.RANK_TRIM)  # every rank inherits it
    sock.send(json.dumps({"ready": os.getpid()}).encode())
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        _reap_leaders()
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, MAX_FDS)
        except InterruptedError:
            continue
        if not data:
            os._exit(0)  # the session closed its end
        request = parse(data)
        if isinstance(request, WorkerRequest):
            from grader.runtimes.torchdist import portable_rank  # noqa: F401 - imported once, for every worker
        pid = os.fork()
        if pid == 0:
            sock.close()
            if isinstance(request, WorkerRequest):
                worker(request, fds)  # never returns
            else:
                leader(request, fds, importlib.import_module(bodies))  # never returns
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"leader": pid}).encode())


def _reap_leaders() -> None:
    from grader.sandbox.reaping import ended_children

    for _ in ended_children():
        pass


def leader(request: GroupRequest, fds: list[int], bodies: Any) -> None:
    """The group leader (never returns): enter the group's network namespace and cgroups, then
    start init, in a new PID namespace when root."""
    from grader.sandbox import namespaces
    from grader.sandbox.parent import die_with_parent

    code = 1
    try:
        die_with_parent(os.getppid(), signal.SIGTERM)
        os.setsid()
        n = request.world_size * FDS_PER_RANK
        report, netns = fds[n], (fds[n + 1] if request.netns else None)
        if request.userns:  # rootless: root in the group's user namespace, which owns its network one
            namespaces.join_user_namespace(fds[n + 2])
            os.close(fds[n + 2])
        if netns is not None:
            namespaces.join_network_namespace(netns)
            os.close(netns)
        for procs in request.cgroups:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        pid_namespace = namespaces.new_pid_namespace() if request.pid_namespace else "off: needs root"
        _send(report, {"pid_namespace": pid_namespace})
        if pid_namespace == "on":
            child = os.fork()
            if child == 0:
                init(request, fds[:n], report, bodies, pid_namespace=True)
            for fd in fds[: n + 1]:  # the ranks' pipes must close when the ranks end, not with us
                os.close(fd)
            _wait_for(child)
        else:
            init(request, fds[:n], report, bodies, pid_namespace=False)
        code = 0
    finally:
        os._exit(code)


def worker(request: WorkerRequest, fds: list[int]) -> None:
    """A portable worker's waiter (never returns): forks the worker on the descriptors it was sent,
    writes its pid and, once it ended, its exit status to the status pipe (what the session's
    ``portable.ForkedProcess`` reads), then exits.  The waiter dies with the zygote, the worker with
    the waiter."""
    from grader.sandbox.parent import die_with_parent

    code = 1
    try:
        die_with_parent(os.getppid(), signal.SIGKILL)
        *ends, status = fds
        waiter = os.getpid()
        child = os.fork()
        if child == 0:
            os.close(status)
            die_with_parent(waiter, signal.SIGKILL)
            from grader.runtimes.torchdist import portable_rank

            portable_rank.forked_main(request.worker, *ends)  # never returns
        for fd in ends:
            os.close(fd)
        os.write(status, STATUS.pack(child))
        _, ended = os.waitpid(child, 0)
        os.write(status, STATUS.pack(os.waitstatus_to_exitcode(ended)))
        code = 0
    finally:
        os._exit(code)


def _wait_for(child: int) -> None:
    while True:
        try:
            os.waitpid(child, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def init(request: GroupRequest, fds: list[int], report: int, bodies: Any, pid_namespace: bool) -> None:
    """Fork the ranks, then report each rank's end and reap everything else, until stopped."""
    from grader.runtimes.torchdist import rank
    from grader.sandbox.namespaces import become_subreaper
    from grader.sandbox.parent import die_with_parent

    die_with_parent(os.getppid(), signal.SIGKILL if pid_namespace else signal.SIGTERM)
    if not pid_namespace:  # orphans come back to us; a stop signal takes all of them down
        become_subreaper()
        signal.signal(signal.SIGTERM, _stop)
    ranks: dict[int, int] = {}
    for r in range(request.world_size):
        own = fds[r * FDS_PER_RANK : (r + 1) * FDS_PER_RANK]
        pid = os.fork()
        if pid == 0:
            os.close(report)
            for fd in fds:
                if fd not in own:
                    os.close(fd)
            rank.main(rank.setup_from(request, r, bodies), rank.RankPipes(*own))  # never returns
        ranks[pid] = r
        _send(report, {"rank": r, "pid": pid})
    for fd in fds:
        os.close(fd)
    while ranks:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        r = ranks.pop(pid, -1)
        if r < 0:
            continue  # an orphan the ranks left behind
        if os.WIFSIGNALED(status):
            _send(report, {"rank": r, "signal": os.WTERMSIG(status)})
        else:
            _send(report, {"rank": r, "exit": os.WEXITSTATUS(status)})
    _stop()


def _send(fd: int, message: dict[str, Any]) -> None:
    try:
        os.write(fd, json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the session is gone; PDEATHSIG ends us next


def _stop(*_: Any) -> None:
    """Every rank has ended, or the session stopped the group: take every descendant down."""
    from grader.sandbox.reaping import reap_descendants

    reap_descendants()
    os._exit(0)


if __name__ == "__main__":
    main()
