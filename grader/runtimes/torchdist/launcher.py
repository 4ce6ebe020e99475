"""Session side: rank groups from the zygote; feed them cases, measure them, always get them back.

A :class:`RankGroup` is N ranks forked by the session's :class:`Zygote` (a process that never held a
case's expected values), joined in a Gloo group through a per-group ``FileStore`` (no port is ever
guessed).  Many cases of one world size run in the same group; after any case that leaves the wire in
doubt (a failure, messages left in flight, traffic the ranks' own records do not explain) the group is
torn down and the next case gets a fresh one, so no case's verdict depends on an earlier one's mess.

What the session knows of a case, it knows from outside the ranks: each rank's end (exit status or
signal) from the group's init, an OOM kill from the rank's cgroup, the traffic from a packet capture in
the group's network namespace (:class:`~grader.runtimes.torchdist.traffic.Capture`), CPU time and thread
states from /proc.  A rank's reply says what it computed and what it claims to have done.

Teardown always happens: per-case wall timeout, deadlock detection (every unfinished rank blocked in
communication with nothing changing), and on close the leader is killed, which ends the group's PID
namespace (or, without one, makes init kill every descendant), and whatever is left in the group's
cgroup is killed before the cgroup is removed.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader import tempdirs
from grader.limits import Limits
from grader.matrix.budgets import grace_over, out_of_time
from grader.matrix.verdicts import fails_as_a_hang_or_worse
from grader.runtimes.torchdist import deadlock, procfs, replies
from grader.runtimes.torchdist.init_lines import InitLines
from grader.runtimes.torchdist.runs import (
    FAILURE_GRACE_S,
    READ_BYTES,
    STACK_WAIT_S,
    CappedOutput,
    CaseRun,
    GroupLifecycle,
    GroupStartError,
    RankReport,
    beyond_the_records,
    case_frames,
    clean,
    drain,
    short_of_the_records,
)
from grader.runtimes.torchdist.session import Sandboxing, Zygote
from grader.runtimes.torchdist.traffic import Capture, Traffic
from grader.runtimes.torchdist.zygote import GroupRequest
from grader.sandbox import netns, wire
from grader.sandbox.cgroups import GroupCgroups, MemoryEvents
from grader.sandbox.status import StatusSlot

#: a capture whose buffer holds bursts wakes the session at most this often: a wake-up per packet kept
#: the session on a core the ranks needed (issue 23; README's Measurements has the whole change's effect)
CAPTURE_EVERY_S = 0.002
SELECT_S = 0.02
SETTLE_S = 0.2  # for data still crossing after every rank replied (an isend nobody waited for)
#: What a case's inputs and replies cross: a 4 MiB input took 64 wake-ups of the rank through a 64 KiB pipe
#: (5 ms), 2 ms through 256 KiB (issue 23); two per rank stay well below fs.pipe-user-pages-soft (64 MiB).
PIPE_BYTES = READ_BYTES
LINGER_S = 1.0  # for a joined thread to leave /proc (RankGroup._threads_left): generous, as load must not matter
LINGER_POLL_S = 0.01
RMTREE_TRIES = 5


@dataclass
class _Rank:
    control: int
    result: int
    output: int
    stacks: int
    status: StatusSlot
    pid: int = 0  # host pid, once known


class RankGroup(GroupLifecycle):
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
        self._dir, self._dir_lock = tempdirs.make(f"grader-ws{world_size}-")  # swept once this process is dead
        os.chmod(self._dir, 0o711)  # a rank must reach the FileStore while it is still root
        self._ranks: list[_Rank] = []
        self._leader = 0
        self._ticket: int | None = None  # the zygote's ticket for the leader, until its pid is taken
        self._init = InitLines()
        self._cgroups: GroupCgroups | None = None
        self._network: netns.GroupNetwork | None = None
        self._capture: Capture | None = None
        self._ready_replies: list[replies.Reply | None] = []
        self._layers: dict[str, str] = {}  # the session's layers, then the ranks' from their ready frames
        self._launch_error: GroupStartError | None = None
        self._threads: list[int] = []  # each rank's threads at ready, before any student code
        #: each rank's memory counters when its last case ended (at ready, before the first): the
        #: next case's baseline, since nothing runs in a rank between two cases
        self._memory: list[MemoryEvents] = []
        self.alive = False

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the ranks and wait for every one's ready frame (:meth:`launch`, then :meth:`wait_ready`)."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the ranks without waiting for them: they join Gloo and build their sandbox while the
        session launches its other groups (``MatrixSession.prepare_groups``, issue 23).  A failure is
        kept for :meth:`wait_ready` to raise."""
        try:
            self._guarded(self._launch)
        except GroupStartError as exc:
            self._launch_error = exc

    def wait_ready(self) -> None:
        """Wait for every rank's ready frame.  Raises :class:`GroupStartError` when they do not come up
        (resources or time running out under load included); whatever fails, the group is closed
        again and leaves nothing behind (processes, cgroups, files)."""
        if self._launch_error is not None:
            raise self._launch_error
        if not self.layers:
            self._guarded(self._wait_ready)

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except GroupStartError:
            raise  # closed where it was raised
        except OSError as exc:
            self.close()
            raise GroupStartError(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def _launch(self) -> None:
        sb = self.sandboxing
        layers = self._layers = sb.layers()
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
        import fcntl  # here: the portable runtime imports this module's constants where fcntl does not exist

        theirs: list[int] = []
        ranks = []
        for r in range(self.world_size):
            c_r, c_w = os.pipe()
            r_r, r_w = os.pipe()
            for fd in (c_w, r_r):
                with contextlib.suppress(OSError):  # over the user's limit: the default size will do
                    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
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
        report_r, report_w = os.pipe()
        self._init = InitLines(report_r)
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
            self._ticket = self.zygote.ask(request, theirs)
        except OSError as exc:
            self.close()
            raise GroupStartError(str(exc)) from exc
        finally:
            for fd in theirs[:owned]:
                os.close(fd)
        for rk in self._ranks:
            for fd in (rk.control, rk.result, rk.output, rk.stacks):
                os.set_blocking(fd, False)
        os.set_blocking(self._init.fd, False)
        self.alive = True

    def _wait_ready(self) -> None:
        self._take_leader()
        layers = self._layers
        run = self._exchange([b""] * self.world_size, self.limits.start_timeout_s, expect="ready")
        if any(rep.status != "ready" for rep in run.ranks):
            self.close()
            raise GroupStartError.not_ready(run)
        self._resolve_pids(time.monotonic() + self.limits.start_timeout_s)
        self._threads = [procfs.threads(rk.pid) for rk in self._ranks]  # the runtime's, Gloo's and the student thread
        self._memory = self._memory_events()
        layers["pid_namespace"] = self._init.pid_namespace
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

    def _take_leader(self) -> None:
        """The leader's pid, once the zygote has answered the group's request."""
        if self._ticket is not None:
            ticket, self._ticket = self._ticket, None
            self._leader = self.zygote.leader(ticket)

    def close(self) -> None:
        """End the group and all it started, its files and cgroups too; again, to finish a close cut short."""
        with contextlib.suppress(OSError):  # a zygote that died took the leader with it
            self._take_leader()
        self.alive, ranks, self._ranks = False, self._ranks, []  # forgotten as let go of: none is closed twice
        for rk in ranks:
            for fd in (rk.control, rk.result, rk.output, rk.stacks):
                with contextlib.suppress(OSError):
                    os.close(fd)
            rk.status.close()
        if self._leader:
            self.kill()
            self._wait_gone([self._leader, *(rk.pid for rk in ranks if rk.pid)])  # cut short here: killed again
            self._leader = 0
        if self._cgroups is not None:
            self._cgroups.close()  # each, itself, safe to run again
        if self._network is not None:
            self._network.close()
        self._init.close()
        for _ in range(RMTREE_TRIES):  # a rank that took long to die may still have written into it
            shutil.rmtree(self._dir, ignore_errors=True)
            if not self._dir.exists():
                break
            time.sleep(0.1)

    def kill(self) -> None:
        """Signal the group's end without waiting for it: a session ending closes every group after
        killing them all, so that they die side by side (``close`` waits)."""
        # With a PID namespace the leader's death takes init, and the kernel the rest of the
        # namespace; without one, init (the leader itself) kills its descendants on SIGTERM.
        with contextlib.suppress(OSError):
            self._take_leader()
        if self._leader:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._leader, signal.SIGKILL if self._init.pid_namespace == "on" else signal.SIGTERM)

    @staticmethod
    def _wait_gone(pids: list[int], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for pid in pids:
            while procfs.alive(pid) and time.monotonic() < deadline:
                time.sleep(0.002)

    # --- one case ------------------------------------------------------------------------------
    def run_case(self, header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], timeout_s: float) -> CaseRun:
        frames = case_frames(header, inputs, self.world_size)
        for rk in self._ranks:
            rk.status.set(StatusSlot.RUNNING, "")
        if self._capture is not None:
            self._capture.begin_case()
        run = self._exchange(frames, timeout_s, expect="case")
        if self._capture is not None:
            run.traffic = self._measured(run)
        if self._cgroups is not None:
            before, self._memory = self._memory, self._memory_events()
            run.memory_kills = [r for r in range(self.world_size) if self._memory[r].oom_kills > before[r].oom_kills]
            run.memory_pressure = self._memory_pressure(before)
        settled = {rep.rank for rep in run.ranks if fails_as_a_hang_or_worse(rep.status)}  # not waited for
        run.threads_left = self._threads_left(settled)
        if not clean(run):
            self.close()
        return run

    def _memory_events(self) -> list[MemoryEvents]:
        return [self._cgroups.memory_events(r) for r in range(self.world_size)] if self._cgroups else []

    def _memory_pressure(self, before: list[MemoryEvents]) -> dict[int, str]:
        """Each rank whose memory cgroup reached its limit during the case, with the figures."""
        assert self._cgroups is not None
        found = {}
        for r in range(self.world_size):
            hits = self._memory[r].limit_hits - before[r].limit_hits
            if hits > 0:
                peak = self._cgroups.peak_mb(r)
                held = f", {peak} MiB at most" if peak is not None else ""
                found[r] = f"reached its memory limit ({self.limits.memory_mb} MiB) {hits} time(s){held}"
        return found

    def _threads_left(self, settled: set[int]) -> dict[int, int]:
        """Rank -> how many more threads its process runs than it had at ready: threads the student's
        code started and left running (read from /proc, outside the rank), a ``hang`` of the case.  A
        thread the case joined may still be on its way out of the kernel on a loaded machine, so a
        count above the ready one is read again for up to ``LINGER_S`` (but a ``settled`` rank's reply
        fails the case as a hang or worse whatever it counts).  A thread left running is there for
        good, and cannot be killed on its own, so such a rank's group is replaced before the next case."""
        deadline = time.monotonic() + LINGER_S
        while True:
            counts = [procfs.threads(rk.pid) for rk in self._ranks]
            left = {r: now - self._threads[r] for r, now in enumerate(counts) if now > self._threads[r]}
            if not left.keys() - settled or time.monotonic() > deadline:
                return left
            time.sleep(LINGER_POLL_S)

    def _measured(self, run: CaseRun) -> Traffic:
        """The case's traffic, once the data every rank's records announce has crossed."""
        assert self._capture is not None
        deadline = time.monotonic() + SETTLE_S
        while True:
            self._capture.drain()
            traffic, missing = self._capture.traffic, self._capture.missing()
            decided = beyond_the_records(run.ranks, traffic) or not short_of_the_records(run.ranks, traffic)
            if (not missing and decided) or time.monotonic() > deadline:
                traffic.lost = traffic.lost or missing
                return traffic
            select.select([self._capture.fileno()], [], [], 0.01)  # the next packet, not a fixed nap

    def _exchange(self, frames: Sequence[bytes | bytearray], timeout_s: float, expect: str) -> CaseRun:
        """Send each rank its frame and collect one reply per rank, or stop the case."""
        t0 = time.monotonic()
        n = self.world_size
        started = [procfs.ticks(rk.pid) for rk in self._ranks]  # to tell spinning from waiting
        pending = [memoryview(f) for f in frames]
        readers = [wire.FrameReader(self.limits.max_result_mb << 20) for _ in range(n)]
        reports: list[RankReport | None] = [None] * n
        ready: list[replies.Reply | None] = [None] * n
        output = CappedOutput(self.limits.output_kb << 10)
        window: deadlock.Window | None = None  # since when every unfinished rank has been blocked
        hang = ""
        grace: procfs.Unstarved | None = None  # since a rank failed: the others' own time (budgets.grace_over)
        capture = self._capture
        capture_due = 0.0  # before then the capture's packets wait in its buffer
        own = procfs.OwnTime([rk.pid for rk in self._ranks]) if expect == "case" else None  # what a budget counts
        # when the capture last saw the ranks' data grow: a zero-window probe or an ACK to a rank that
        # stopped reading is a packet, not progress (a sleeping rank's case ran on to the ceiling)
        flowed, crossed = -math.inf, 0
        while any(rep is None for rep in reports):
            rlist = [rk.output for rk in self._ranks] + [self._init.fd]
            rlist += [rk.result for r, rk in enumerate(self._ranks) if reports[r] is None]
            wait = SELECT_S
            if capture is not None:
                due = capture_due - time.monotonic()
                if due > 0:
                    wait = due
                else:
                    rlist.append(capture.fileno())
            wlist = [self._ranks[r].control for r in range(n) if len(pending[r])]
            readable, writable, _ = select.select(rlist, wlist, [], wait)
            if capture is not None and capture.fileno() in readable:
                capture.drain()
                total = capture.traffic.total_bytes()
                if total > crossed:
                    flowed, crossed = time.monotonic(), total
                if capture.holds_bursts:
                    capture_due = time.monotonic() + CAPTURE_EVERY_S
            if self._init.fd in readable:
                self._init.read()
            for r, rk in enumerate(self._ranks):
                if rk.control in writable:
                    try:
                        written = os.write(rk.control, pending[r][:PIPE_BYTES])
                        pending[r] = pending[r][written:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except BrokenPipeError:
                        pending[r] = memoryview(b"")
                if rk.output in readable:
                    output.feed(r, drain(rk.output))
                if reports[r] is None and rk.result in readable:
                    data = drain(rk.result)
                    try:
                        got = readers[r].feed(data) if data else []
                        if got:
                            reply = replies.parse(got[0].header, n)
                            ready[r] = reply
                            said = (reply.status, reply.message, got[0].tensors, reply.claims, True)
                            reports[r] = RankReport(r, *said, threads=reply.threads)
                        elif not data:
                            reports[r] = self._init.death(r)
                    except wire.WireError as exc:
                        reports[r] = RankReport(r, "wire_error", f"rank {r} sent a malformed reply: {exc}")
            now = time.monotonic()
            if grace is None and any(rep is not None and rep.status not in ("ok", "ready") for rep in reports):
                grace = procfs.Unstarved([os.getpid(), *(rk.pid for rk in self._ranks)])
            if grace and grace_over(FAILURE_GRACE_S, now - grace.began, grace.seconds, self.limits.case_timeout_s):
                break  # one rank failed; the others had a moment of their own to report their own failure
            slots = [rk.status.get() for rk in self._ranks]
            waiting = [r for r in range(n) if reports[r] is None]
            if expect == "case" and waiting and all(slots[r][0] == StatusSlot.BLOCKED for r in waiting):
                # Blocked by their own account.  Still not a deadlock while they use real CPU time, or
                # while a thread mostly waits for a CPU (a starved Gloo thread with data in its socket).
                if window is None or window.slots != slots:
                    window = deadlock.Window(slots, now + deadlock.SAMPLE_S)
                if now >= window.next_sample:
                    window.sample(now, [procfs.activity(self._ranks[r].pid) for r in waiting])
                    if window.deadlocked(now, self.limits.deadlock_after_s):
                        hang = "deadlock"
                        break
            else:
                window = None
            wall, quiet = now - t0, now - flowed
            if wall > timeout_s and (own is None or out_of_time(self.limits, timeout_s, wall, own.seconds, quiet)):
                hang = "timeout"
                break
        unfinished = [r for r in range(n) if reports[r] is None]
        elapsed = time.monotonic() - t0
        cpu = {r: procfs.cpu_percent(started[r], procfs.ticks(self._ranks[r].pid), elapsed) for r in unfinished}
        stacks = self._stacks(unfinished) if unfinished else {}
        final: list[RankReport] = []
        for r in range(n):
            rep = reports[r] or RankReport(r, "hang" if hang else "no_reply", cpu_percent=cpu.get(r))
            rep.blocked_in = self._ranks[r].status.get()[2] if reports[r] is None else ""
            rep.stack = stacks.get(r, "")
            final.append(rep)
        for r, rk in enumerate(self._ranks):
            output.feed(r, drain(rk.output))
        self._ready_replies = ready
        return CaseRun(final, time.monotonic() - t0, hang, output.text(), output.truncated)

    def _resolve_pids(self, deadline: float) -> None:
        """Host pids of the ranks (for /proc and signals): init's children, matched by the pid init
        knows them by (the same number without a PID namespace)."""
        while len(self._init.ns_pids) < self.world_size:
            if time.monotonic() > deadline:
                self.close()
                raise GroupStartError(f"init named {len(self._init.ns_pids)} of {self.world_size} ranks in time")
            self._init.wait(0.05)
        by_ns = {ns: r for r, ns in self._init.ns_pids.items()}
        init = self._leader
        if self._init.pid_namespace == "on":
            children = procfs.children(self._leader)
            init = children[0] if children else self._leader
        for pid in procfs.children(init):
            r = by_ns.get(procfs.ns_pid(pid))
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
                dumps[fds[fd]] += drain(fd)[: 1 << 16]
                quiet_since = time.monotonic()
            if all(dumps.values()) and time.monotonic() - quiet_since > 0.1:
                break
        return {r: d.decode("utf-8", "replace") for r, d in dumps.items()}
