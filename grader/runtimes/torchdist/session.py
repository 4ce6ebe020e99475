"""Session side, set up once for all of a session's rank groups: how they are confined
(:class:`Sandboxing`), the zygote that forks their ranks (:class:`Zygote`), and what every rank is
told of the pack's student code (:func:`student_config`)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

from grader.pack import AssignmentPack
from grader.runtimes.torchdist.zygote import GroupRequest
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
    """The session's zygote process (``grader.runtimes.torchdist.zygote``)."""

    def __init__(self, bodies: str, search_path: tuple[str, ...] = ()) -> None:
        """``bodies``: the pack's rank-side module; ``search_path``: where a pack that is not installed
        lives (the zygote runs with ``-I``, so nothing else is on its path)."""
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        env["GLOO_SOCKET_IFNAME"] = "lo"
        cmd = [sys.executable, "-I", "-m", "grader.runtimes.torchdist.zygote", "--parent", str(os.getpid())]
        cmd += ["--socket", str(theirs.fileno()), "--bodies", bodies]
        cmd += [f"--path={path}" for path in search_path]
        self.proc = subprocess.Popen(cmd, env=env, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, cwd="/")
        theirs.close()
        self._ready = False

    def wait_ready(self) -> None:
        if self._ready:
            return
        self._sock.settimeout(ZYGOTE_START_S)
        try:
            answer = self._sock.recv(1024)
        except TimeoutError as exc:
            raise OSError("the zygote did not start") from exc
        if not answer:
            raise OSError(f"the zygote exited while starting (status {self.proc.poll()})")
        self._ready = True

    def spawn(self, request: GroupRequest, fds: list[int]) -> int:
        """Ask for a group; returns its leader's pid."""
        self.wait_ready()
        socket.send_fds(self._sock, [json.dumps(asdict(request)).encode()], fds)
        answer = self._sock.recv(1024)
        if not answer:
            raise OSError(f"the zygote died (status {self.proc.poll()})")
        return int(json.loads(answer)["leader"])

    def close(self) -> None:
        self._sock.close()
        self.proc.kill()
        self.proc.wait()


def student_config(pack: AssignmentPack, policy: dict[str, list[str]]) -> dict[str, Any]:
    """What the ranks of a group are told of the pack's student code, with the rubric's
    ``policy.allow``: the fields of the rank's ``StudentConfig``."""
    return {
        "placeholders": {m: list(names) for m, names in pack.placeholders.items()},
        "imports_before": {m: list(needs) for m, needs in pack.imports_before.items()},
        "attributed": list(pack.attributed),
        "policy": policy,
    }
