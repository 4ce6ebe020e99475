"""Where a case's verdict is decided: from what the session observed, what the ranks answered and
what the session expected.

The order of precedence says which failure a student should hear about first: tampering (traffic
the ranks' records cannot explain) and policy violations outrank everything (their numbers do not
count), then resource and process failures, then hangs, then "not implemented", import errors,
and finally wrong values.  ``error`` (the grader's own failure) is never decided here from
anything a rank says or does: only the session declares it (a group that could not start).

The facts that earn points come from outside the ranks: how a rank ended (its group's init), an
OOM kill (its cgroup), and the messages and bytes between ranks (the capture of the group's
network namespace).  The trace a case records for the rubric's trace checks is computed from
those measurements; a rank's own records contribute only what no measurement can see (which of
the student's functions sent a message, and the events of the time-vs-rank diagram), and only
after they were found consistent with the measured traffic.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.pack import Case, Prepared
from grader.results import Verdict
from grader.runtimes import OUTSIDE
from grader.runtimes.torchdist.runs import CaseRun, RankReport, explains

_STATUS_VERDICT = {
    "forbidden": Verdict.FORBIDDEN,
    "memory": Verdict.MEMORY,
    "exited": Verdict.CRASH,
    "signaled": Verdict.CRASH,
    "wire_error": Verdict.CRASH,
    "exception": Verdict.CRASH,
    "no_reply": Verdict.CRASH,
    "hang": Verdict.HANG,
    "not_implemented": Verdict.NOT_IMPLEMENTED,
    "import_error": Verdict.IMPORT_ERROR,
    "bad_return": Verdict.WRONG,
}
#: a rank that raised explains the peers still waiting for it when the case ended ("no_reply")
_CAUSE_ORDER = {"signaled": 0, "exited": 1, "wire_error": 2, "exception": 3, "no_reply": 4}
_PRECEDENCE = [
    Verdict.TAMPERING,
    Verdict.FORBIDDEN,
    Verdict.MEMORY,
    Verdict.CRASH,
    Verdict.HANG,
    Verdict.NOT_IMPLEMENTED,
    Verdict.IMPORT_ERROR,
    Verdict.WRONG,
]


def fails_as_a_hang_or_worse(status: str) -> bool:
    """Whether a rank's reply of this ``status`` fails its case as a hang or worse, whatever the rest of
    the case shows: a thread the case left running (:func:`threads_left`) can then change its message,
    never its verdict, so the session need not wait to see whether such a thread leaves."""
    verdict = _STATUS_VERDICT.get(status, Verdict.CRASH) if status != "ok" else Verdict.PASS
    return verdict in _PRECEDENCE[: _PRECEDENCE.index(Verdict.HANG) + 1]


@dataclass
class Decision:
    verdict: Verdict
    message: str
    trace: dict[str, Any] = field(default_factory=dict)
    details: str = ""  # long form: stacks, captured output


def decide(case: Case, prepared: Prepared, run: CaseRun, allowed: frozenset[str] = frozenset()) -> Decision:
    """The verdict of one case; ``allowed`` are the built-in collectives the case's policy lets through."""
    decision = _decide(case, prepared, run, allowed)
    left = threads_left(run)
    if not left:
        return decision
    if decision.verdict in _PRECEDENCE[: _PRECEDENCE.index(Verdict.HANG) + 1]:  # the worse failure is said first
        decision.message = f"{decision.message} ({left})"
        return decision
    # a case is done when its work is: a thread still running is work that never finished, as in the
    # threads runtime (``grader.runtimes.threads.harness``), whatever the values said
    return Decision(Verdict.HANG, f"a thread was left running after the case: {left}", decision.trace, decision.details)


def _decide(case: Case, prepared: Prepared, run: CaseRun, allowed: frozenset[str]) -> Decision:
    trace = summarize_trace(run, prepared.tensor_bytes, keep_events=case.keep_events)
    unexplained = tampering(run, allowed)
    if unexplained:
        return Decision(Verdict.TAMPERING, unexplained, trace, _details(run))
    for rep in run.ranks:
        if rep.rank in run.memory_kills:  # the kernel's word, whatever the rank said before it died
            rep.status, rep.message = "memory", f"rank {rep.rank} was killed by the kernel: memory limit exceeded"
    failures = [(rep, _STATUS_VERDICT.get(rep.status, Verdict.CRASH)) for rep in run.ranks if rep.status != "ok"]
    if failures:
        verdict = min((v for _, v in failures), key=_PRECEDENCE.index)
        if verdict is Verdict.CRASH and _memory_kill(run):
            verdict = Verdict.MEMORY
        if verdict is Verdict.HANG and (run.memory_pressure or run.memory_kills):
            return Decision(Verdict.MEMORY, _memory_before_time(run), trace, _details(run))
        return Decision(verdict, _failure_message(verdict, failures, run), trace, _details(run))
    judged = prepared.outputs_problem([rep.tensors for rep in run.ranks]) if prepared.outputs_problem else None
    for rep, expected in zip(run.ranks, prepared.expected, strict=True):
        problem = compare(rep.tensors, expected, prepared.tolerance) if judged is None else judged
        if problem:
            hint = case.nan_hint
            nan = any(t.is_floating_point() and bool(t.isnan().any()) for t in rep.tensors.values())
            if hint and nan:
                problem += f" ({hint})"
            who = f"rank {rep.rank}: " if case.processes == case.world_size else ""  # else the names say which thread
            if nan and case.must_use and case.world_size > 1:  # data came around the exchange
                return Decision(Verdict.NOT_PARALLEL, who + problem, trace, _details(run))
            return Decision(Verdict.WRONG, who + problem, trace, _details(run))
    required = case.must_use
    if required and case.world_size > 1 and not all(required in rep.claims.student_functions for rep in run.ranks):
        return Decision(
            Verdict.NOT_PARALLEL,
            f"right values, but not every rank exchanged data through {required}, which the handout requires here",
            trace,
        )
    if case.must_communicate and case.world_size > 1 and not _communicated(run):
        if run.traffic is not None:
            return Decision(
                Verdict.TAMPERING, "the ranks agreed without exchanging a single byte: the data came another way", trace
            )
        return Decision(
            Verdict.FORBIDDEN,
            "no point-to-point message was observed, yet the ranks agreed: communication bypassed send/recv",
            trace,
        )
    return Decision(Verdict.PASS, "", trace)


def measured(run: CaseRun) -> tuple[list[dict[str, torch.Tensor]], list[tuple[int, int, int]] | None]:
    """Every rank's reply tensors and the messages measured on the wire, in order (None unmeasured):
    what a pack's ``judge`` decides from."""
    order = run.traffic.order if run.traffic is not None and not run.traffic.lost else None
    return [rep.tensors for rep in run.ranks], order


def judged(decision: Decision, verdict: tuple[str, str] | None) -> Decision:
    """A passing decision, or the pack judge's verdict on it (an unknown verdict is the pack's bug)."""
    if verdict is None:
        return decision
    return Decision(Verdict(verdict[0]), verdict[1], decision.trace, decision.details)


def threads_left(run: CaseRun) -> str:
    """The threads the case left running in its ranks' processes ("" when none), each named as the
    rank names it: ``rank 0: 'warmup' at collectives.py:21 in _warm_up``.  The count is the session's,
    from /proc; the ranks' names say which, and none in the student's code charges nothing."""
    if not run.threads_left:
        return ""
    named = {rep.rank: rep.threads for rep in run.ranks}
    if not any(OUTSIDE not in name for names in named.values() for name in names):
        # Counted, but no thread the ranks can see runs the submission's code: a thread of Python's or
        # torch's own on its way out (CI saw HW12's 'Dummy-52' charged on a loaded machine).  The group
        # is still replaced; only a thread in the student's code is charged.
        return ""
    ranks: dict[str, list[int]] = {}  # the same thread in every rank is said once
    for r, count in sorted(run.threads_left.items()):
        ranks.setdefault("; ".join(named.get(r, ())) or f"{count} thread(s) of the submission's", []).append(r)
    said = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {names}" for names, rs in ranks.items()]
    return "; ".join(said[:4])


def tampering(run: CaseRun, allowed: frozenset[str]) -> str:
    """Why the measured traffic is not what the policy and the ranks' records allow ("" when it is, or
    when the group has no capture at all: no root).  A measurement that is incomplete decides nothing
    in the submission's favour: after the session ran the case again, it fails the case, which fails
    every check that reads its traffic (the must-communicate rule, the bonus and design metrics)."""
    traffic = run.traffic
    if traffic is None:
        return ""
    if traffic.lost:
        runs = f"in each of {run.runs} runs of this case" if run.runs > 1 else "in this case"
        return (
            f"the grader could not measure the traffic between the ranks {runs} ({traffic.lost}); "
            "a case whose traffic is not measured completely does not pass"
        )
    forbidden = [name for name in traffic.collectives() if name not in allowed]
    if forbidden:  # the guard raises before a forbidden collective runs: it was patched or bypassed
        return (
            f"a built-in {forbidden[0]} ran although this task forbids it, past the grader's guard "
            "(patched, unwrapped, or reached by a route around torch.distributed's functions)"
        )
    if explains(run.ranks, traffic):
        return ""
    if traffic.foreign:
        return f"traffic between the ranks that no send/recv explains: {traffic.foreign[0]}"
    by_rank = {rep.rank: rep for rep in run.ranks}
    for (src, dst), pair in sorted(traffic.pairs.items()):
        rep = by_rank.get(src)
        if rep is None or not rep.replied:
            continue
        unseen = [name for name in pair.collectives if name not in rep.claims.collectives]
        if unseen:
            return (
                f"a built-in {unseen[0]} ran between rank {src} and rank {dst} that no call the grader "
                "could see started (a route around torch.distributed's functions?)"
            )
        recorded = rep.claims.sent_to.get(dst, 0)
        if pair.messages != recorded or pair.bytes > rep.claims.sent_bytes_to.get(dst, 0):
            return (
                f"rank {src} sent rank {dst} {pair.messages} message(s) ({pair.bytes} bytes) on the wire, "
                f"but its send/recv calls account for {recorded}"
            )
    return "the ranks' records of their send/recv calls do not match the traffic measured between them"


def _communicated(run: CaseRun) -> bool:
    """Measured where there is a capture (complete: a lost one was decided before); the ranks' records
    only where there is none (no root)."""
    if run.traffic is not None:
        return run.traffic.total_bytes() > 0 or any(p.messages for p in run.traffic.pairs.values())
    return any(rep.claims.sends for rep in run.ranks)


def compare(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], tol: dict[str, float]) -> str:
    """'' when equal within tolerance (elementwise ``rtol``/``atol``, or ``norm``: the relative error of
    the whole tensor), else what differs, in the words a student needs."""
    for name, want in expected.items():
        label = "the result" if name == "out" else ("the argument after the call" if name == "arg" else name)
        if name not in got:
            return f"{label} is missing"
        have = got[name]
        if have.dtype != want.dtype:
            return f"{label} has dtype {_dt(have.dtype)}, expected {_dt(want.dtype)}"
        if tuple(have.shape) != tuple(want.shape):
            return f"{label} has shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        if have.numel() == 0 or torch.equal(have, want):  # the common case, without the float64 copies below
            continue
        if "norm" not in tol and within(have, want, tol.get("rtol", 0.0), tol.get("atol", 0.0)):
            continue
        a, b = have.double(), want.double()
        if "norm" in tol:  # relative to the whole tensor: one element across a ReLU's kink is not an error
            relative = float((a - b).norm() / b.norm().clamp_min(1e-300))
            if relative <= tol["norm"]:  # NaN is never within
                continue
            bad = ~torch.isclose(a, b, rtol=tol["norm"], atol=0.0, equal_nan=False)
            index = tuple(int(i) for i in bad.nonzero()[0].tolist()) if bool(bad.any()) else (0,) * a.dim()
            return (
                f"{label} differs: relative error {relative:.3g} (||got - expected|| / ||expected||, at most "
                f"{tol['norm']:g}); first at index {index}: expected {_num(want[index])}, got {_num(have[index])}"
            )
        bad = ~torch.isclose(a, b, rtol=tol.get("rtol", 0.0), atol=tol.get("atol", 0.0), equal_nan=False)
        if bool(bad.any()):
            err = (a - b).abs().nan_to_num(nan=float("inf"))
            index = tuple(int(i) for i in bad.nonzero()[0].tolist())
            return (
                f"{label} differs: max abs error {float(err.max()):.3g}, "
                f"{int(bad.sum())} of {bad.numel()} elements wrong; "
                f"first at index {index}: expected {_num(want[index])}, got {_num(have[index])}"
            )
    return ""


def within(have: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> bool:
    """True when every element of ``have`` is within ``atol + rtol * |want|`` of ``want``'s, in float64:
    what ``torch.isclose`` decides when it finds every element close, in a quarter of its time (A9's
    1M-element allreduce, per rank: 17 -> 4 ms).  Only True is final: an element not within (NaN
    included), or an infinite expected value (isclose's ``inf == inf``), leaves the verdict to isclose."""
    expected = want.double()  # ``want`` itself when it is float64: only new tensors are written below
    error = torch.sub(have.double(), expected).abs_()
    allowed = expected.abs().mul_(rtol).add_(atol)
    return bool(error.le(allowed).all()) and math.isfinite(float(allowed.max()))


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _num(t: torch.Tensor) -> str:
    value = t.item()
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _failure_message(verdict: Verdict, failures: list[tuple[RankReport, Verdict]], run: CaseRun) -> str:
    if verdict is Verdict.HANG:
        said = [rep.message for rep, v in failures if v is Verdict.HANG and rep.replied and rep.message]
        if said:  # a threads-runtime rank: its harness named where each of its threads is stuck
            return "; ".join(said)
        waits = [_blocked(rep) for rep, v in failures if v is Verdict.HANG]
        kind = "likely deadlock" if run.hang == "deadlock" else f"timed out after {run.seconds:.1f} s"
        return f"{kind}: " + "; ".join(waits)
    # the root cause first: a rank that died explains the peers that lost their connection to it
    reps = sorted((rep for rep, v in failures if v is verdict), key=lambda rep: _CAUSE_ORDER.get(rep.status, 9))
    first = reps[0]
    message = first.message or first.status
    if not message.startswith("rank "):
        message = f"rank {first.rank}: {message}"
    if len(reps) > 1:
        message += f" (and {len(reps) - 1} other rank{'s' if len(reps) > 2 else ''})"
    return message


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


#: of one CPU: a rank that used more, outside any send or receive, was computing (eight spinning ranks
#: on two cores get 25% each; a sleeping one, or one blocked in Gloo, close to 0%)
SPINNING_PERCENT = 10


def _blocked(rep: RankReport) -> str:
    """Where a rank that never replied was, and whether it was spinning or waiting: 'rank 1 waits in
    recv(src=0) at collectives.py:17 in my_allreduce (blocked, 0% CPU)', 'rank 0 is spinning (99% CPU)
    at ...', 'rank 2 is idle (0% CPU), in no send or receive, at ...'."""
    where = _innermost_student_frame(rep.stack)
    cpu = rep.cpu_percent
    if rep.blocked_in.startswith("importing"):
        return f"rank {rep.rank} never finished {rep.blocked_in}" + where
    if rep.blocked_in:
        return f"rank {rep.rank} waits in {rep.blocked_in}" + (f" (blocked, {cpu}% CPU)" if cpu is not None else "")
    if cpu is None:
        return f"rank {rep.rank} is still running" + where
    if cpu >= SPINNING_PERCENT:
        return f"rank {rep.rank} is spinning ({cpu}% CPU){where}"
    return f"rank {rep.rank} is idle ({cpu}% CPU), in no send or receive (sleeping or waiting on something else){where}"


def _innermost_student_frame(stack: str) -> str:
    for m in _FRAME.finditer(stack):  # faulthandler lists the innermost frame first
        if "/src/" in m["file"] and "site-packages" not in m["file"]:
            return f" at {m['file'].rsplit('/', 1)[-1]}:{m['line']} in {m['fn']}"
    return ""


def _memory_before_time(run: CaseRun) -> str:
    """A case that ran out of time after its memory cgroup hit the limit: memory, with the figures
    (a rank filling memfd or tmpfs pages slowly is throttled by reclaim long before an OOM kill)."""
    said = [f"rank {r} {figure}" for r, figure in sorted(run.memory_pressure.items())]
    said += [f"rank {r} was killed by the kernel" for r in run.memory_kills if r not in run.memory_pressure]
    return "memory limit exceeded: " + "; ".join(said) + f", and the case then ran out of time ({run.hang})"


def _memory_kill(run: CaseRun) -> bool:
    return any(rep.status == "signaled" and "SIGKILL" in rep.message for rep in run.ranks) and "bad_alloc" in run.output


def _details(run: CaseRun) -> str:
    parts = []
    for rep in run.ranks:
        if rep.stack:
            parts.append(f"--- rank {rep.rank} stack ---\n{_student_stack(rep.stack)}")
    if run.output:
        parts.append("--- captured output (first lines) ---\n" + "\n".join(run.output.splitlines()[:40]))
    return "\n".join(parts)


def _student_stack(stack: str) -> str:
    lines = [ln for ln in stack.splitlines() if "/src/" in ln or ln.startswith(("Thread", "Current thread"))]
    return "\n".join(lines[:30]) or stack[:2000]


def summarize_trace(run: CaseRun, tensor_bytes: int, keep_events: bool) -> dict[str, Any]:
    """The case's trace as the rubric's trace checks read it.  Counts are measured on the wire
    where the group has a capture (``"measured": true``); elsewhere (no root) they are the ranks'
    own records.  A lost capture leaves the counts out, so no trace check can pass on them."""
    traffic = run.traffic
    ranks: list[dict[str, Any]] = []
    for rep in run.ranks:
        if traffic is not None:
            sends, bytes_sent = traffic.sent_by(rep.rank)
            recvs, bytes_recv = traffic.received_by(rep.rank)
        else:
            claims = rep.claims
            sends, bytes_sent, recvs, bytes_recv = claims.sends, claims.bytes_sent, claims.recvs, claims.bytes_recv
        ranks.append(
            {"rank": rep.rank, "sends": sends, "recvs": recvs, "bytes_sent": bytes_sent, "bytes_recv": bytes_recv}
        )
    if traffic is not None:
        collectives = traffic.collectives()
    else:
        collectives = sorted({c for rep in run.ranks for c in rep.claims.collectives})
    summary: dict[str, Any] = {
        "measured": traffic is not None and not traffic.lost,
        "ranks": ranks,
        "max_sends_per_rank": max((r["sends"] for r in ranks), default=0),
        "max_bytes_sent_per_rank": max((r["bytes_sent"] for r in ranks), default=0),
        "tensor_bytes": tensor_bytes,
        "collectives": collectives,
        "student_functions": sorted({f for rep in run.ranks for f in rep.claims.student_functions}),
    }
    if traffic is not None and traffic.lost:
        for key in ("max_sends_per_rank", "max_bytes_sent_per_rank", "collectives"):
            del summary[key]
        summary["lost"] = traffic.lost
    if keep_events:
        events = [e for rep in run.ranks for e in rep.claims.events]
        summary["events"] = sorted(events, key=lambda e: (e["t"], e["rank"]))[:4000]
    return summary
