"""Runner side: fork a group of rank processes, feed them cases, and always get them back.

A :class:`RankGroup` is N ranks forked from this process (which has imported torch, never
student code: ~0.1 s for 4 ranks), joined in a Gloo group through a per-group ``FileStore`` (no
port is ever guessed).  Many cases of one world size run in the same group; after any case that
leaves the wire in doubt (a failure, or sends and receives that do not pair up) the group is torn
down and the next case gets a fresh one, so no case's verdict depends on an earlier one's mess.

Teardown always happens: per-case wall timeout, deadlock detection (every unfinished rank blocked
in communication with nothing changing), SIGKILL of every rank and of every process they left
behind (this process is a child subreaper, so even ``setsid`` double-forks come back to it).
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from grader.sandbox import wire
from grader.sandbox.rank import GRADER_FAILURE
from grader.sandbox.status import StatusBoard

STACK_WAIT_S = 0.5
_LIVE_RANKS: set[int] = set()  # pids of every live group's ranks: spared when one group is reaped
FAILURE_GRACE_S = 0.3


@dataclass(frozen=True)
class Limits:
    """The runner's share of the rubric's ``limits`` section."""

    case_timeout_s: float = 10.0
    deadlock_after_s: float = 1.0
    start_timeout_s: float = 30.0
    output_kb: int = 64
    max_result_mb: int = 256
    memory_mb: int = 2048
    nproc: int = 64
    cpu_s: int = 60
    file_size_mb: int = 64


@dataclass
class RankReport:
    """What one rank did in one case, as the runner observed it."""

    rank: int
    status: str  # a reply's status, or "exited" / "signaled" / "hang" / "wire_error" / "no_reply"
    message: str = ""
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    blocked_in: str = ""  # the status slot's text when the case was stopped
    stack: str = ""  # faulthandler dump, student frames first


@dataclass
class CaseRun:
    ranks: list[RankReport]
    seconds: float
    hang: str = ""  # "" | "deadlock" | "timeout"
    output: str = ""  # captured stdout/stderr of all ranks, capped
    output_truncated: bool = False


@dataclass
class _Rank:
    pid: int
    control: int
    result: int
    output: int
    stacks: int
    scratch: Path


class GroupStartError(Exception):
    def __init__(self, run: CaseRun) -> None:
        super().__init__("rank group failed to start")
        self.run = run


class RankGroup:
    def __init__(self, world_size: int, sandbox: Path, limits: Limits, isolation: Any = None) -> None:
        self.world_size = world_size
        self.sandbox = sandbox
        self.limits = limits
        self.isolation = isolation  # callable (rank, scratch) -> IsolationConfig, or None
        self.layers: dict[str, str] = {}
        self._dir = Path(tempfile.mkdtemp(prefix=f"grader-ws{world_size}-"))
        os.chmod(self._dir, 0o711)  # a rank dropped to the student uid must reach its own scratch dir
        self._status = StatusBoard(world_size)
        self._ranks: list[_Rank] = []
        self.alive = False

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        from grader.sandbox import rank as rank_mod

        store = self._dir / "store"
        pipes = []
        for r in range(self.world_size):
            c_r, c_w = os.pipe()
            r_r, r_w = os.pipe()
            o_r, o_w = os.pipe()
            s_r, s_w = os.pipe()
            scratch = self._dir / f"rank{r}"
            scratch.mkdir(mode=0o700)
            pipes.append((c_r, c_w, r_r, r_w, o_r, o_w, s_r, s_w, scratch))
        for r, (c_r, c_w, r_r, r_w, o_r, o_w, s_r, s_w, scratch) in enumerate(pipes):
            setup = rank_mod.RankSetup(
                rank=r,
                world_size=self.world_size,
                store_path=str(store),
                sandbox=str(self.sandbox),
                scratch=str(scratch),
                isolation=self.isolation(r, scratch) if self.isolation else None,
            )
            pid = os.fork()
            if pid == 0:  # child: never returns
                rank_mod.main(setup, rank_mod.RankPipes(c_r, r_w, o_w, s_w), self._status)
            self._ranks.append(_Rank(pid, c_w, r_r, o_r, s_r, scratch))
            _LIVE_RANKS.add(pid)
        for c_r, _, _, r_w, _, o_w, _, s_w, _ in pipes:
            for fd in (c_r, r_w, o_w, s_w):
                os.close(fd)
        for rk in self._ranks:
            for fd in (rk.control, rk.result, rk.output, rk.stacks):
                os.set_blocking(fd, False)
        self.alive = True
        run = self._exchange([b""] * self.world_size, self.limits.start_timeout_s, expect="ready")
        if any(rep.status != "ready" for rep in run.ranks):
            self.close()
            raise GroupStartError(run)
        self.layers = {}
        for rep in run.ranks:
            self.layers.update(rep.trace)

    def close(self) -> None:
        """Kill every rank and everything they started; remove the group's files."""
        for rk in self._ranks:
            for fd in (rk.control, rk.result, rk.output, rk.stacks):
                try:
                    os.close(fd)
                except OSError:
                    pass
            _kill(rk.pid)
        for rk in self._ranks:
            _reap(rk.pid)
            _LIVE_RANKS.discard(rk.pid)
        _reap_descendants()
        self._ranks = []
        self.alive = False
        self._status.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> RankGroup:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- one case ------------------------------------------------------------------------------
    def run_case(self, header: dict[str, Any], inputs: list[dict[str, torch.Tensor]], timeout_s: float) -> CaseRun:
        header = {**header, "op": "case", "t0": time.monotonic()}
        frames = [wire.encode(header, inputs[r]) for r in range(self.world_size)]
        for r in range(self.world_size):
            self._status.set(r, StatusBoard.RUNNING, "")
        run = self._exchange(frames, timeout_s, expect="case")
        if not _clean(run):
            self.close()
        return run

    def _exchange(self, frames: list[bytes], timeout_s: float, expect: str) -> CaseRun:
        """Send each rank its frame and collect one reply per rank, or stop the case."""
        t0 = time.monotonic()
        n = self.world_size
        pending = [memoryview(f) for f in frames]
        readers = [wire.FrameReader(self.limits.max_result_mb << 20) for _ in range(n)]
        reports: list[RankReport | None] = [None] * n
        output = _CappedOutput(self.limits.output_kb << 10)
        window: _Window | None = None  # since when every unfinished rank has been blocked
        hang = ""
        failed_at: float | None = None
        while any(rep is None for rep in reports):
            rlist = [rk.output for rk in self._ranks] + [
                rk.result for r, rk in enumerate(self._ranks) if reports[r] is None
            ]
            wlist = [self._ranks[r].control for r in range(n) if len(pending[r])]
            readable, writable, _ = select.select(rlist, wlist, [], 0.02)
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
                    except wire.WireError as exc:
                        reports[r] = RankReport(r, "wire_error", f"rank {r} sent a malformed result: {exc}")
                        continue
                    if got:
                        reports[r] = _report(r, got[0])
                    elif not data:
                        reports[r] = self._death(r)
            now = time.monotonic()
            if failed_at is None and any(rep is not None and rep.status not in ("ok", "ready") for rep in reports):
                failed_at = now
            if failed_at is not None and now - failed_at > FAILURE_GRACE_S:
                break  # one rank failed; the others had a moment to report their own failure
            slots = [self._status.get(r) for r in range(n)]
            waiting = [r for r in range(n) if reports[r] is None]
            if expect == "case" and waiting and all(slots[r][0] == StatusBoard.BLOCKED for r in waiting):
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
        stacks = self._stacks([r for r in range(n) if reports[r] is None]) if any(r is None for r in reports) else {}
        final: list[RankReport] = []
        for r in range(n):
            rep = reports[r] or RankReport(r, "hang" if hang else "no_reply")
            rep.blocked_in = self._status.get(r)[2] if reports[r] is None else ""
            rep.stack = stacks.get(r, "")
            final.append(rep)
        for r, rk in enumerate(self._ranks):
            output.feed(r, _drain(rk.output))
        return CaseRun(final, time.monotonic() - t0, hang, output.text(), output.truncated)

    def _death(self, r: int) -> RankReport:
        """The result pipe closed without a reply: find out how the rank ended."""
        pid = self._ranks[r].pid
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return RankReport(r, "exited", f"rank {r} exited")
            if done:
                if os.WIFSIGNALED(status):
                    sig = os.WTERMSIG(status)
                    return RankReport(r, "signaled", f"rank {r} was killed by {signal.Signals(sig).name}")
                code = os.WEXITSTATUS(status)
                if code == GRADER_FAILURE:
                    return RankReport(r, "grader_error", f"rank {r}: the grader failed inside the rank process")
                return RankReport(r, "exited", f"rank {r} exited with status {code} during the case")
            time.sleep(0.01)
        return RankReport(r, "exited", f"rank {r} closed its result pipe without replying")

    def _stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask each unfinished rank for its Python stack (faulthandler on SIGUSR1)."""
        for r in ranks:
            try:
                os.kill(self._ranks[r].pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
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


def _report(r: int, frame: wire.Frame) -> RankReport:
    head = frame.header
    # a ready frame reports the isolation layers where a case reply reports its trace
    raw = head.get("isolation" if head.get("status") == "ready" else "trace")
    trace = {str(k): v for k, v in raw.items()} if isinstance(raw, dict) else {}
    raw_events = head.get("events")
    events = raw_events if isinstance(raw_events, list) else []
    return RankReport(
        rank=r,
        status=str(head.get("status", "no_reply"))[:40],
        message=str(head.get("message", ""))[:4000],
        tensors=frame.tensors,
        trace=trace,
        events=events[:20_000],
    )


#: Reply statuses after which a rank process is still sound: the failure was the student's Python
#: raising, not the process or the wire breaking.  "memory" is not among them (the heap may be spent).
REUSABLE = frozenset({"ok", "not_implemented", "forbidden", "import_error", "bad_return", "exception"})


def _clean(run: CaseRun) -> bool:
    """May the group run another case?  Only if every rank replied, none broke, and every message
    pairs up, so nothing stray is left in flight for a later case's receive to pick up."""
    if run.hang or any(rep.status not in REUSABLE for rep in run.ranks):
        return False
    sent: dict[tuple[int, int], int] = {}
    for rep in run.ranks:
        for peer, count in rep.trace.get("sent_to", {}).items():
            sent[(rep.rank, int(peer))] = count
    received: dict[tuple[int, int], int] = {}
    for rep in run.ranks:
        for peer, count in rep.trace.get("recv_from", {}).items():
            received[(int(peer), rep.rank)] = count
    return sent == received


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


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _activity(pid: int) -> tuple[int, bool]:
    """(CPU ticks used, some thread runnable) of a process, from /proc; (-1, False) once it is gone."""
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


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _reap_descendants() -> None:
    try:
        from grader.sandbox.isolation import reap_descendants
    except ImportError:  # isolation layers not installed: ranks were still killed directly
        return
    reap_descendants(spare=frozenset(_LIVE_RANKS))
