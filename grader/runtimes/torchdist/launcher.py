"""Session side: rank groups from the zygote; feed them cases, measure them, always get them back.

A :class:`RankGroup` is N ranks forked by the session's :class:`Zygote` (a fresh interpreter that
never held a case's expected values), joined in a Gloo group through a per-group ``FileStore``
(no port is ever guessed).  Many cases of one world size run in the same group; after any case
that leaves the wire in doubt (a failure, messages left in flight, traffic the ranks' own records
do not explain) the group is torn down and the next case gets a fresh one, so no case's verdict
depends on an earlier one's mess.

What the session knows of a case, it knows from outside the ranks: each rank's end (exit status
or signal) from the group's init, an OOM kill from the rank's cgroup, the traffic from a packet
capture in the group's network namespace (:class:`~grader.runtimes.torchdist.traffic.Capture`), CPU time and
thread states from /proc.  A rank's reply says what it computed and what it claims to have done.

Teardown always happens: per-case wall timeout, deadlock detection (every unfinished rank blocked
in communication with nothing changing), and on close the leader is killed, which ends the
group's PID namespace (or, without one, makes init kill every descendant), and whatever is left
in the group's cgroup is killed before the cgroup is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from grader.limits import Limits
from grader.pack import AssignmentPack
from grader.runtimes.torchdist import replies
from grader.runtimes.torchdist.replies import Claims
from grader.runtimes.torchdist.traffic import Capture, Traffic
from grader.runtimes.torchdist.zygote import GroupRequest
from grader.sandbox import netns, wire
from grader.sandbox.cgroups import Cgroups, GroupCgroups
from grader.sandbox.slots import Slot
from grader.sandbox.status import StatusSlot

STACK_WAIT_S = 1.0  # a spinning rank on a loaded machine can take a while to be scheduled and dump
FAILURE_GRACE_S = 0.3
DEATH_WAIT_S = 1.0  # for init's word on how a rank whose pipe closed ended
SETTLE_S = 0.2  # for data still crossing after every rank replied (an isend nobody waited for)
ZYGOTE_START_S = 120.0
MAX_REPORT_LINE = 256
RMTREE_TRIES = 5


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
    ends: bool = False  # it replied, but left a thread running: the group ends with the case


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


class GroupStartError(Exception):
    """A group that never got to run student code: the grader's failure, never the student's."""

    def __init__(self, reason: str, run: CaseRun | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.run = run


@dataclass
class _Rank:
    control: int
    result: int
    output: int
    stacks: int
    status: StatusSlot
    pid: int = 0  # host pid, once known


def student_config(pack: AssignmentPack, policy: dict[str, list[str]]) -> dict[str, Any]:
    """What the ranks of a group are told of the pack's student code, with the rubric's
    ``policy.allow``: the fields of the rank's ``StudentConfig``."""
    return {
        "placeholders": {m: list(names) for m, names in pack.placeholders.items()},
        "imports_before": {m: list(needs) for m, needs in pack.imports_before.items()},
        "attributed": list(pack.attributed),
        "policy": policy,
    }


class RankGroup:
    def __init__(
        self,
        world_size: int,
        sandbox: Path,
        limits: Limits,
        zygote: Zygote,
        sandboxing: Sandboxing,
        student: dict[str, Any],
    ) -> None:
        """``student``: the ranks' ``StudentConfig`` fields (placeholders, imports_before, attributed,
        policy), from the pack and the rubric."""
        self.world_size = world_size
        self.sandbox = sandbox
        self.limits = limits
        self.zygote = zygote
        self.sandboxing = sandboxing
        self.student = student
        self.layers: dict[str, str] = {}
        self._dir = Path(tempfile.mkdtemp(prefix=f"grader-ws{world_size}-"))
        os.chmod(self._dir, 0o711)  # a rank must reach the FileStore while it is still root
        self._ranks: list[_Rank] = []
        self._leader = 0
        self._report = -1
        self._report_buf = b""
        self._ended: dict[int, str] = {}  # rank -> how init saw it end
        self._ns_pids: dict[int, int] = {}
        self._cgroups: GroupCgroups | None = None
        self._network: netns.GroupNetwork | None = None
        self._capture: Capture | None = None
        self._ready_replies: list[replies.Reply | None] = []
        self._threads: list[int] = []  # each rank's threads at ready, before any student code
        self.pid_namespace = "off: the group's leader did not say"  # what the leader reports
        self.alive = False

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the ranks and wait for every one's ready frame.  Raises :class:`GroupStartError`
        when they do not come up (resources or time running out under load included); whatever
        fails, the group is closed again and leaves nothing behind (processes, cgroups, files)."""
        try:
            self._start()
        except GroupStartError:
            raise  # closed where it was raised
        except OSError as exc:
            self.close()
            raise GroupStartError(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        sb = self.sandboxing
        layers = sb.layers()
        if sb.network:
            try:
                self._network = netns.loopback_namespace(rootless=sb.rootless)
                self._capture = Capture(self._network.capture)
            except OSError as exc:
                layers["measured_traffic"] = f"off: {exc}"
        if sb.cgroups is not None:
            try:
                self._cgroups = sb.cgroups.group(self.world_size, self.limits.memory_mb)
            except OSError as exc:
                layers["cgroup"] = f"off: {exc}"
        theirs: list[int] = []
        ranks = []
        for r in range(self.world_size):
            c_r, c_w = os.pipe()
            r_r, r_w = os.pipe()
            o_r, o_w = os.pipe()
            s_r, s_w = os.pipe()
            slot, slot_fd = StatusSlot.create()
            scratch = self._dir / f"rank{r}"
            scratch.mkdir(mode=0o700)
            self._ranks.append(_Rank(c_w, r_r, o_r, s_r, slot))
            theirs += [c_r, r_w, o_w, s_w, slot_fd]
            uid = sb.slot.uid(self.world_size, r) if sb.slot is not None else None
            cgroups = self._cgroups.rank_procs(r) if self._cgroups is not None else []
            ranks.append({"scratch": str(scratch), "uid": uid, "gid": uid, "cgroups": cgroups})
        self._report, report_w = os.pipe()
        theirs.append(report_w)
        owned = len(theirs)  # the namespace descriptors that follow stay the GroupNetwork's
        if self._network is not None:
            theirs.append(self._network.netns)
            if self._network.userns is not None:
                theirs.append(self._network.userns)
        request = GroupRequest(
            world_size=self.world_size,
            store=str(self._dir / "store"),
            sandbox=str(self.sandbox),
            ranks=ranks,
            cgroups=self._cgroups.leader_procs() if self._cgroups is not None else [],
            isolation=sb.isolation,
            pid_namespace=sb.pid_namespace,
            netns=self._network is not None,
            userns=self._network is not None and self._network.userns is not None,
            student=self.student,
        )
        try:
            self._leader = self.zygote.spawn(request, theirs)
        except OSError as exc:
            self.close()
            raise GroupStartError(str(exc)) from exc
        finally:
            for fd in theirs[:owned]:
                os.close(fd)
        for rk in self._ranks:
            for fd in (rk.control, rk.result, rk.output, rk.stacks):
                os.set_blocking(fd, False)
        os.set_blocking(self._report, False)
        self.alive = True
        run = self._exchange([b""] * self.world_size, self.limits.start_timeout_s, expect="ready")
        if any(rep.status != "ready" for rep in run.ranks):
            self.close()
            failed = [rep for rep in run.ranks if rep.status != "ready"]
            reason = "; ".join(f"rank {rep.rank}: {rep.message or rep.status}" for rep in failed[:3])
            tail = run.output.splitlines()[-5:]
            raise GroupStartError(reason + ("\n" + "\n".join(tail) if tail else ""), run)
        self._resolve_pids(time.monotonic() + self.limits.start_timeout_s)
        self._threads = [_threads(rk.pid) for rk in self._ranks]  # the runtime's, Gloo's and the student thread
        layers["pid_namespace"] = self.pid_namespace
        connections = {}
        for rep, reply in zip(run.ranks, self._ready_replies, strict=True):
            assert reply is not None  # every rank replied "ready"
            layers.update({k: v for k, v in reply.layers.items() if k not in layers})
            connections[rep.rank] = [list(c) for c in reply.connections]
        if self._capture is not None:
            self._capture.map_connections(connections)
        if self._cgroups is not None:
            self._cgroups.limit_tasks(self.world_size * self.limits.nproc)
        self.layers = layers

    def close(self) -> None:
        """End the group and everything it started; remove its files and cgroups."""
        for rk in self._ranks:
            for fd in (rk.control, rk.result, rk.output, rk.stacks):
                with contextlib.suppress(OSError):
                    os.close(fd)
            rk.status.close()
        if self._leader:
            # With a PID namespace the leader's death takes init, and the kernel the rest of the
            # namespace; without one, init (the leader itself) kills its descendants on SIGTERM.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._leader, signal.SIGKILL if self.pid_namespace == "on" else signal.SIGTERM)
            self._wait_gone([self._leader, *(rk.pid for rk in self._ranks if rk.pid)])
        if self._cgroups is not None:
            self._cgroups.close()
        if self._network is not None:
            self._network.close()
        if self._report >= 0:
            with contextlib.suppress(OSError):
                os.close(self._report)
            self._report = -1
        self._ranks = []
        self._leader = 0
        self.alive = False
        for _ in range(RMTREE_TRIES):  # a rank that took long to die may still have written into it
            shutil.rmtree(self._dir, ignore_errors=True)
            if not self._dir.exists():
                break
            time.sleep(0.1)

    @staticmethod
    def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for pid in pids:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.002)

    def __enter__(self) -> RankGroup:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one case ------------------------------------------------------------------------------
    def run_case(self, header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], timeout_s: float) -> CaseRun:
        header = {"op": "case", **header, "t0": time.monotonic()}
        frames = [wire.encode(header, inputs[r]) for r in range(self.world_size)]
        for rk in self._ranks:
            rk.status.set(StatusSlot.RUNNING, "")
        ooms = [self._cgroups.oom_kills(r) for r in range(self.world_size)] if self._cgroups else []
        hits = [self._cgroups.limit_hits(r) for r in range(self.world_size)] if self._cgroups else []
        if self._capture is not None:
            self._capture.begin_case()
        run = self._exchange(frames, timeout_s, expect="case")
        if self._capture is not None:
            run.traffic = self._measured(run)
        if self._cgroups is not None:
            run.memory_kills = [r for r in range(self.world_size) if self._cgroups.oom_kills(r) > ooms[r]]
            run.memory_pressure = self._memory_pressure(hits)
        run.threads_left = self._threads_left()
        if not clean(run):
            self.close()
        return run

    def _memory_pressure(self, before: list[int]) -> dict[int, str]:
        """Each rank whose memory cgroup reached its limit during the case, with the figures."""
        assert self._cgroups is not None
        found = {}
        for r in range(self.world_size):
            hits = self._cgroups.limit_hits(r) - before[r]
            if hits > 0:
                peak = self._cgroups.peak_mb(r)
                held = f", {peak} MiB at most" if peak is not None else ""
                found[r] = f"reached its memory limit ({self.limits.memory_mb} MiB) {hits} time(s){held}"
        return found

    def _threads_left(self) -> dict[int, int]:
        """Rank -> how many more threads its process runs than it had at ready: threads the student's
        code started and left running (read from /proc, outside the rank).  A thread cannot be killed
        on its own, so such a rank's group is replaced before the next case."""
        left = {}
        for r, rk in enumerate(self._ranks):
            now = _threads(rk.pid)
            if now > self._threads[r]:
                left[r] = now - self._threads[r]
        return left

    def _measured(self, run: CaseRun) -> Traffic:
        """The case's traffic, once the data every rank's records announce has crossed."""
        assert self._capture is not None
        deadline = time.monotonic() + SETTLE_S
        while True:
            self._capture.drain()
            traffic, missing = self._capture.traffic, self._capture.missing()
            if (not missing and explains(run.ranks, traffic)) or time.monotonic() > deadline:
                traffic.lost = traffic.lost or missing
                return traffic
            time.sleep(0.01)

    def _exchange(self, frames: list[bytes], timeout_s: float, expect: str) -> CaseRun:
        """Send each rank its frame and collect one reply per rank, or stop the case."""
        t0 = time.monotonic()
        n = self.world_size
        started = [_activity(rk.pid)[0] for rk in self._ranks]  # CPU ticks, to tell spinning from waiting
        pending = [memoryview(f) for f in frames]
        readers = [wire.FrameReader(self.limits.max_result_mb << 20) for _ in range(n)]
        reports: list[RankReport | None] = [None] * n
        ready: list[replies.Reply | None] = [None] * n
        output = _CappedOutput(self.limits.output_kb << 10)
        window: _Window | None = None  # since when every unfinished rank has been blocked
        hang = ""
        failed_at: float | None = None
        while any(rep is None for rep in reports):
            rlist = [rk.output for rk in self._ranks] + [self._report]
            rlist += [rk.result for r, rk in enumerate(self._ranks) if reports[r] is None]
            if self._capture is not None:
                rlist.append(self._capture.fileno())
            wlist = [self._ranks[r].control for r in range(n) if len(pending[r])]
            readable, writable, _ = select.select(rlist, wlist, [], 0.02)
            if self._capture is not None and self._capture.fileno() in readable:
                self._capture.drain()
            if self._report in readable:
                self._read_report()
            for r, rk in enumerate(self._ranks):
                if rk.control in writable:
                    try:
                        written = os.write(rk.control, pending[r][: 1 << 16])
                        pending[r] = pending[r][written:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except BrokenPipeError:
                        pending[r] = memoryview(b"")
                if rk.output in readable:
                    output.feed(r, _drain(rk.output))
                if reports[r] is None and rk.result in readable:
                    data = _drain(rk.result)
                    try:
                        got = readers[r].feed(data) if data else []
                        if got:
                            reply = replies.parse(got[0].header, n)
                            ready[r] = reply
                            reports[r] = RankReport(
                                r, reply.status, reply.message, got[0].tensors, reply.claims, True, ends=reply.ends
                            )
                        elif not data:
                            reports[r] = self._death(r)
                    except wire.WireError as exc:
                        reports[r] = RankReport(r, "wire_error", f"rank {r} sent a malformed reply: {exc}")
            now = time.monotonic()
            if failed_at is None and any(rep is not None and rep.status not in ("ok", "ready") for rep in reports):
                failed_at = now
            if failed_at is not None and now - failed_at > FAILURE_GRACE_S:
                break  # one rank failed; the others had a moment to report their own failure
            slots = [rk.status.get() for rk in self._ranks]
            waiting = [r for r in range(n) if reports[r] is None]
            if expect == "case" and waiting and all(slots[r][0] == StatusSlot.BLOCKED for r in waiting):
                # Blocked by their own account.  Still not a deadlock while they use real CPU time, or
                # while a thread mostly waits for a CPU (a starved Gloo thread with data in its socket).
                activity = [_activity(self._ranks[r].pid) for r in waiting]
                if window is None or window.slots != slots:
                    window = _Window(slots, now, sum(t for t, _ in activity))
                window.samples += 1
                window.runnable += any(runnable for _, runnable in activity)
                if window.deadlocked(now, sum(t for t, _ in activity), self.limits.deadlock_after_s):
                    hang = "deadlock"
                    break
            else:
                window = None
            if now - t0 > timeout_s:
                hang = "timeout"
                break
        unfinished = [r for r in range(n) if reports[r] is None]
        elapsed = time.monotonic() - t0
        cpu = {r: _cpu_percent(started[r], _activity(self._ranks[r].pid)[0], elapsed) for r in unfinished}
        stacks = self._stacks(unfinished) if unfinished else {}
        final: list[RankReport] = []
        for r in range(n):
            rep = reports[r] or RankReport(r, "hang" if hang else "no_reply", cpu_percent=cpu.get(r))
            rep.blocked_in = self._ranks[r].status.get()[2] if reports[r] is None else ""
            rep.stack = stacks.get(r, "")
            final.append(rep)
        for r, rk in enumerate(self._ranks):
            output.feed(r, _drain(rk.output))
        self._ready_replies = ready
        return CaseRun(final, time.monotonic() - t0, hang, output.text(), output.truncated)

    def _read_report(self) -> None:
        """init's lines: {"rank", "pid"} when it forked a rank, {"rank", "exit"|"signal"} when one ended."""
        self._report_buf += _drain(self._report)
        *lines, self._report_buf = self._report_buf.split(b"\n")
        self._report_buf = self._report_buf[:MAX_REPORT_LINE]
        for line in lines:
            try:
                message = json.loads(line)
                if "pid_namespace" in message:
                    self.pid_namespace = str(message["pid_namespace"])
                    continue
                r = int(message["rank"])
            except (ValueError, KeyError, TypeError):
                continue
            if "pid" in message:
                self._ns_pids[r] = int(message["pid"])
            elif "signal" in message:
                name = signal.Signals(int(message["signal"])).name
                self._ended[r] = f"signaled:rank {r} was killed by {name}"
            elif "exit" in message:
                self._ended[r] = f"exited:rank {r} exited with status {int(message['exit'])} during the case"

    def _death(self, r: int) -> RankReport:
        """The result pipe closed without a reply: init says how the rank ended."""
        deadline = time.monotonic() + DEATH_WAIT_S
        while r not in self._ended and time.monotonic() < deadline:
            select.select([self._report], [], [], 0.02)
            self._read_report()
        status, _, message = self._ended.get(r, f"exited:rank {r} closed its result pipe without replying").partition(
            ":"
        )
        return RankReport(r, status, message)

    def _resolve_pids(self, deadline: float) -> None:
        """Host pids of the ranks (for /proc and signals): init's children, matched by the pid init
        knows them by (the same number without a PID namespace)."""
        while len(self._ns_pids) < self.world_size:
            if time.monotonic() > deadline:
                self.close()
                raise GroupStartError(f"init named {len(self._ns_pids)} of {self.world_size} ranks in time")
            select.select([self._report], [], [], 0.05)
            self._read_report()
        by_ns = {ns: r for r, ns in self._ns_pids.items()}
        init = self._leader
        if self.pid_namespace == "on":
            children = _children(self._leader)
            init = children[0] if children else self._leader
        for pid in _children(init):
            r = by_ns.get(_ns_pid(pid))
            if r is not None:
                self._ranks[r].pid = pid

    def _stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask each unfinished rank for its Python stack (faulthandler on SIGUSR1)."""
        for r in ranks:
            if self._ranks[r].pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._ranks[r].pid, signal.SIGUSR1)
        deadline = time.monotonic() + STACK_WAIT_S
        dumps = {r: b"" for r in ranks}
        fds = {self._ranks[r].stacks: r for r in ranks}
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            readable, _, _ = select.select(list(fds), [], [], 0.05)
            for fd in readable:
                dumps[fds[fd]] += _drain(fd)[: 1 << 16]
                quiet_since = time.monotonic()
            if all(dumps.values()) and time.monotonic() - quiet_since > 0.1:
                break
        return {r: d.decode("utf-8", "replace") for r, d in dumps.items()}


#: Reply statuses after which a rank process is still sound: the failure was the student's Python
#: raising, not the process or the wire breaking.  "memory" is not among them (the heap may be spent).
REUSABLE = frozenset({"ok", "not_implemented", "forbidden", "import_error", "bad_return", "exception"})


def explains(ranks: list[RankReport], traffic: Traffic) -> bool:
    """Do the ranks' records account for every message measured (and, when every rank replied,
    does every recorded message show on the wire)?  Unexplained traffic is a ``tampering`` verdict."""
    if traffic.foreign or traffic.lost:
        return False
    by_rank = {rep.rank: rep for rep in ranks}
    everyone = all(rep.replied for rep in ranks)
    for (src, dst), pair in traffic.pairs.items():
        rep = by_rank.get(src)
        if rep is None or not rep.replied:
            continue  # a rank that died left no records: its traffic is judged by its crash
        claimed = (rep.claims.sent_to.get(dst, 0), rep.claims.sent_bytes_to.get(dst, 0))
        if pair.messages > claimed[0] or pair.bytes > claimed[1]:
            return False
        if any(name not in rep.claims.collectives for name in pair.collectives):
            return False
    if everyone:
        for rep in ranks:
            for dst, count in rep.claims.sent_to.items():
                measured = traffic.pairs.get((rep.rank, dst))
                if dst >= 0 and (measured is None or measured.messages != count):
                    return False
    return True


def clean(run: CaseRun) -> bool:
    """May the group run another case?  Only if every rank replied, none broke or left a thread of its
    own running, every message recorded pairs up, and the wire shows exactly what the records say
    (nothing left in flight)."""
    if (
        run.hang
        or run.memory_kills
        or run.threads_left
        or any(rep.status not in REUSABLE or rep.ends for rep in run.ranks)
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


class _CappedOutput:
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


def _drain(fd: int) -> bytes:
    """Read what is available (bounded per call so one chatty rank cannot starve the loop)."""
    chunks = []
    total = 0
    while total < 4 << 20:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


@dataclass
class _Window:
    """A stretch of time in which every unfinished rank reports itself blocked, unchanged."""

    slots: list[tuple[int, int, str]]
    start: float
    ticks: int  # CPU ticks of the blocked ranks at the start
    samples: int = 0
    runnable: int = 0  # samples in which some thread was waiting for a CPU

    def deadlocked(self, now: float, ticks: int, after_s: float) -> bool:
        elapsed = now - self.start
        cpu_s = (ticks - self.ticks) / _CLK_TCK
        return elapsed > after_s and cpu_s < 0.1 * elapsed and self.runnable * 2 < self.samples


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # Windows: the portable runtime


def _activity(pid: int) -> tuple[int, bool]:
    """(CPU ticks used, some thread runnable) of a process, from /proc; (-1, False) once it is gone."""
    if not pid:
        return -1, False
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime + stime, every thread included
        runnable = False
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                runnable |= f.read().rsplit(")", 1)[1].split()[0] == "R"
        return ticks, runnable
    except (OSError, IndexError, ValueError):
        return -1, False


def _threads(pid: int) -> int:
    """Threads of a live process (0 once it is gone or was never known)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) if pid else 0
    except OSError:
        return 0


def _cpu_percent(start: int, end: int, seconds: float) -> int | None:
    """CPU used between two /proc readings of a process, in percent of one CPU (None if unreadable)."""
    if start < 0 or end < 0 or seconds <= 0:
        return None
    return round(100 * (end - start) / _CLK_TCK / seconds)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def _ns_pid(pid: int) -> int:
    """The pid a process has in its own (innermost) PID namespace."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
