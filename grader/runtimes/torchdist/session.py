"""Session side, set up once for all of a session's rank groups: how they are confined
(:class:`Sandboxing`), the zygote that forks their ranks (:class:`Zygote`), and what every rank is
told of the pack's student code (:func:`student_config`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from grader.pack import AssignmentPack
from grader.runtimes import RankSide
from grader.runtimes.torchdist.zygote import ZYGOTE_ENV, GroupRequest, WorkerRequest, scrubbed_environment
from grader.sandbox.cgroups import Cgroups
from grader.sandbox.slots import Slot

ZYGOTE_START_S = 120.0


@dataclass(frozen=True)
class Sandboxing:
    """How a session confines its groups: decided once, reported in ``results.json`` ``isolation``."""

    isolation: dict[str, Any] | None  # IsolationConfig fields shared by every rank; None: no layers
    slot: Slot | None = None  # uids for the ranks (root)
    cgroups: Cgroups | None = None
    network: bool = False  # a network namespace and a capture per group (root, or rootless)
    pid_namespace: bool = False
    rootless: bool = False  # the group's namespaces inside a user namespace of its own (no root needed)

    @classmethod
    def for_this_process(cls, isolation: dict[str, Any] | None, rootless: bool = False) -> Sandboxing:
        """Every layer this process can build: all of them as root; rootless (where unprivileged user
        namespaces work) the group's namespaces and capture; the rank-side ones otherwise."""
        if isolation is not None and rootless and os.geteuid() != 0:
            return cls(isolation, network=True, pid_namespace=True, rootless=True)
        if isolation is None or os.geteuid() != 0:
            return cls(isolation)
        from grader.sandbox import slots

        return cls(isolation, slots.acquire(), Cgroups.detect(), network=True, pid_namespace=True)

    def layers(self) -> dict[str, str]:
        """The group-level layers as the session set them up (rank-level ones come from the ranks)."""
        if self.isolation is None:
            return {}
        need_root = "off: needs root"
        no_cgroup = "off: needs root (a rootless run has no cgroup delegated to it)" if self.rootless else need_root
        cgroups = no_cgroup if self.cgroups is None else (self.cgroups.off or "on")
        return {
            "zygote": "on",
            "pid_namespace": "on" if self.pid_namespace else need_root,
            "cgroup": cgroups,
            "measured_traffic": (ROOTLESS_CAPTURE if self.rootless else "on") if self.network else need_root,
        }

    def close(self) -> None:
        if self.slot is not None:
            self.slot.release()


#: Without root the kernel caps a socket's receive buffer at net.core.rmem_max (SO_RCVBUFFORCE needs root).
ROOTLESS_CAPTURE = (
    "on: rootless; the capture's buffer is capped at net.core.rmem_max, so a case whose traffic overflows it "
    "is counted from the ranks' own records (a lost measurement, never a verdict)"
)


class Zygote:
    """The session's zygote process (``grader.runtimes.torchdist.zygote``): forked by the session's
    host before it became the session (:meth:`forked`, a grading), or started as a process of its own
    (:meth:`start`, ``grader bench`` and tests)."""

    def __init__(self, sock: socket.socket, pid: int, proc: subprocess.Popen[bytes] | None = None) -> None:
        self._sock = sock
        self.pid = pid
        self._proc = proc  # when started as a process of its own
        self._reaped = False  # a forked zygote this process has reaped already
        self._ready = False
        self._asked = 0  # requests sent
        self._answered = 0  # answers read
        self._answers: dict[int, int] = {}  # ticket -> leader pid, read but not yet taken

    @classmethod
    def forked(cls) -> Zygote:
        """The zygote ``grader.matrix.host`` forked, from what it left in the environment."""
        fd, _, pid = os.environ.pop(ZYGOTE_ENV).partition(":")
        return cls(socket.socket(fileno=int(fd)), int(pid))

    @classmethod
    def start(cls, side: RankSide) -> Zygote:
        """A zygote of its own: a fresh interpreter, with a scrubbed environment, that imports a pack's
        rank side (its ``path`` is where a pack that is not installed lives; the zygote runs with
        ``-I``, so nothing else is on its path)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        cmd = [sys.executable, "-I", "-m", "grader.runtimes.torchdist.zygote", "--parent", str(os.getpid())]
        cmd += ["--socket", str(theirs.fileno()), "--bodies", side.bodies, "--runtime", side.runtime]
        cmd += [f"--path={path}" for path in side.path]
        env = scrubbed_environment()
        proc = subprocess.Popen(cmd, env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, cwd="/")
        theirs.close()
        return cls(ours, proc.pid, proc)

    def wait_ready(self) -> None:
        if self._ready:
            return
        self._sock.settimeout(ZYGOTE_START_S)
        try:
            answer = self._sock.recv(1024)
        except TimeoutError as exc:
            raise OSError("the zygote did not start") from exc
        if not answer:
            raise OSError(f"the zygote exited while starting ({self._status()})")
        self._ready = True

    def ask(self, request: GroupRequest | WorkerRequest, fds: list[int]) -> int:
        """Ask for a group (or a portable worker) without waiting for it: returns the ticket :meth:`leader`
        takes.  A session asks for all its groups at once, so the zygote forks their leaders one after
        another while the session prepares the next group (issue 23: waiting for each fork cost A9 0.3-0.5 s)."""
        self.wait_ready()
        socket.send_fds(self._sock, [json.dumps(asdict(request)).encode()], fds)
        self._asked += 1
        return self._asked - 1

    def leader(self, ticket: int) -> int:
        """The pid of the leader of the group asked for with ``ticket``.  The zygote serves requests in
        order, so the answers come in the order of the tickets."""
        while ticket not in self._answers:
            answer = self._sock.recv(1024)
            if not answer:
                raise OSError(f"the zygote died ({self._status()})")
            self._answers[self._answered] = int(json.loads(answer)["leader"])
            self._answered += 1
        return self._answers.pop(ticket)

    def _status(self) -> str:
        if self._proc is not None:
            return f"status {self._proc.poll()}"
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return "already reaped"
        if not pid:
            return "still running"
        self._reaped = True  # its pid may be another process's from now on: never signal it again
        return f"status {os.waitstatus_to_exitcode(status)}"

    def close(self) -> None:
        self._sock.close()
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            return
        if self._reaped:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def student_config(pack: AssignmentPack, policy: dict[str, list[str]]) -> dict[str, Any]:
    """What the ranks of a group are told of the pack's student code, with the rubric's
    ``policy.allow``: the fields of the rank's ``StudentConfig``."""
    return {
        "placeholders": {m: list(names) for m, names in pack.placeholders.items()},
        "imports_before": {m: list(needs) for m, needs in pack.imports_before.items()},
        "attributed": list(pack.attributed),
        "policy": policy,
    }
