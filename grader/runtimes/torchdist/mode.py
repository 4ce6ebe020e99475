"""The isolation a session starts its ranks in (:class:`Isolation`), decided once per session from
``--isolation`` (:func:`decide`).

The full sandbox where the process is root on Linux, the rootless one where unprivileged user
namespaces work (see ``grader.sandbox.netns``), and the portable one (``portable``,
``portable_group``) where there is no ``os.fork``, the system is not Linux, or no namespace can be
made at all, or when ``--isolation portable`` asks for it.

Apart from the portable worker pool because every session decides, and most never start the pool:
this module imports neither torch nor ``multiprocessing``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from grader.runtimes.torchdist.traffic import Traffic

ADVISORY = "advisory; the instructor's run is the grade of record"


def start_method(system: str = sys.platform) -> str:
    """How a portable worker starts.  On Linux, forked from the zygote the session's host forked before
    it was told anything (``zygote``): a torch import per worker is most of this runtime's cost, and a
    warm host has paid it before the grading.  Elsewhere, a fresh interpreter of its own (``spawn``):
    Windows has no fork, and macOS's system frameworks are not safe to fork, which is why Python spawns
    there too."""
    return "zygote" if system.startswith("linux") else "spawn"


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
        from grader.sandbox.namespaces import user_namespaces

        return cls(sys.platform, True, False, user_namespaces())


@dataclass(frozen=True)
class Isolation:
    """The isolation a session uses: ``full`` (root), ``rootless`` (a user namespace) or ``portable``.
    Its ``mode`` layer (:meth:`layers`) says which, in ``results.json``."""

    name: str
    why: str

    @property
    def portable(self) -> bool:
        return self.name == "portable"

    def measured(self, traffic: Traffic | None) -> Traffic | None:
        """The traffic a case is decided on.  Rootless, the capture's buffer is capped at
        net.core.rmem_max, so a large case on a loaded machine can overflow it through no doing of the
        submission: a capture still incomplete after its rerun is no measurement, and the case is
        counted from the ranks' own records (``session.ROOTLESS_CAPTURE``), as in the portable runtime.
        As root a lost capture stays lost, and fails the case (``verdicts.tampering``)."""
        if self.name == "rootless" and traffic is not None and traffic.lost:
            return None
        return traffic

    def layers(self, method: str = "", ahead: int = 0) -> dict[str, str]:
        """What the session reports beside the groups' own layers (``method``: :func:`start_method`'s;
        ``ahead``: spawned workers its host started before the grading, told nothing of it until then)."""
        if not self.portable:
            return {"mode": f"on: {self.name} ({self.why})"}
        off = "off: portable runtime"
        started = {
            "spawn": "a fresh interpreter (spawn)",
            "zygote": "forked from the session's zygote, which imported only torch and the rank side (zygote)",
        }[method or start_method()]
        if ahead:
            started += f"; {ahead} of them started by its host before the grading was sent to it"
        return {
            "mode": f"off: portable runtime ({self.why}): {ADVISORY}",
            "zygote": f"on: every rank is {started}, with a scrubbed environment",
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


def decide(requested: str, host: Host | None = None) -> Isolation:
    """The isolation for ``--isolation requested`` (auto, full or portable) on ``host`` (this machine by
    default)."""
    if requested == "portable":
        return Isolation("portable", "--isolation portable")
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
        return Isolation("portable", missing)
    return Isolation("full", "root") if host.root else Isolation("rootless", "an unprivileged user namespace")
