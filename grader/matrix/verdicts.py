"""Where a case's verdict is decided: from what the ranks reported and what the runner expected.

The order of precedence says which failure a student should hear about first: a policy
violation outranks everything (its numbers do not count), then resource and process failures,
then hangs, then "not implemented", import errors, and finally wrong values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.packs.a9.catalog import Case
from grader.packs.a9.expected import Prepared
from grader.results import Verdict
from grader.sandbox.launcher import CaseRun, RankReport

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
    "grader_error": Verdict.ERROR,
}
_CAUSE_ORDER = {"signaled": 0, "exited": 1, "wire_error": 2, "no_reply": 3, "exception": 4}
_PRECEDENCE = [
    Verdict.ERROR,  # the grader's own failure: nothing else about the case can be trusted
    Verdict.FORBIDDEN,
    Verdict.MEMORY,
    Verdict.CRASH,
    Verdict.HANG,
    Verdict.NOT_IMPLEMENTED,
    Verdict.IMPORT_ERROR,
    Verdict.WRONG,
]


@dataclass
class Decision:
    verdict: Verdict
    message: str
    trace: dict[str, Any] = field(default_factory=dict)
    details: str = ""  # long form: stacks, captured output


def decide(case: Case, prepared: Prepared, run: CaseRun) -> Decision:
    trace = summarize_trace(run, prepared.tensor_bytes, keep_events=bool(case.params.get("keep_events")))
    failures = [(rep, _STATUS_VERDICT.get(rep.status, Verdict.CRASH)) for rep in run.ranks if rep.status != "ok"]
    if failures:
        verdict = min((v for _, v in failures), key=_PRECEDENCE.index)
        if verdict is Verdict.CRASH and _memory_kill(run):
            verdict = Verdict.MEMORY
        return Decision(verdict, _failure_message(verdict, failures, run), trace, _details(run))
    if case.task == 1 and case.world_size > 1 and not any(r.get("sends") for r in trace["ranks"]):
        return Decision(
            Verdict.FORBIDDEN,
            "no point-to-point message was observed, yet the ranks agreed: communication bypassed send/recv",
            trace,
        )
    for rep, expected in zip(run.ranks, prepared.expected, strict=True):
        problem = compare(rep.tensors, expected, prepared.tolerance)
        if problem:
            return Decision(Verdict.WRONG, f"rank {rep.rank}: {problem}", trace, _details(run))
    return Decision(Verdict.PASS, "", trace)


def compare(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], tol: dict[str, float]) -> str:
    """'' when equal within tolerance, else what differs, in the words a student needs."""
    for name, want in expected.items():
        label = "the result" if name == "out" else ("the argument after the call" if name == "arg" else name)
        if name not in got:
            return f"{label} is missing"
        have = got[name]
        if have.dtype != want.dtype:
            return f"{label} has dtype {_dt(have.dtype)}, expected {_dt(want.dtype)}"
        if tuple(have.shape) != tuple(want.shape):
            return f"{label} has shape {tuple(have.shape)}, expected {tuple(want.shape)}"
        if have.numel() == 0:
            continue
        a, b = have.double(), want.double()
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


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _num(t: torch.Tensor) -> str:
    value = t.item()
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _failure_message(verdict: Verdict, failures: list[tuple[RankReport, Verdict]], run: CaseRun) -> str:
    if verdict is Verdict.HANG:
        waits = [_blocked(rep) for rep, v in failures if v is Verdict.HANG]
        kind = "likely deadlock" if run.hang == "deadlock" else "timed out"
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


def _blocked(rep: RankReport) -> str:
    """'rank 1 waits in recv(src=0) at collectives.py:17 in my_allreduce', else where it is stuck."""
    if rep.blocked_in and not rep.blocked_in.startswith("importing"):
        return f"rank {rep.rank} waits in {rep.blocked_in}"
    if rep.blocked_in:
        return f"rank {rep.rank} never finished {rep.blocked_in}" + _innermost_student_frame(rep.stack)
    return f"rank {rep.rank} is still running" + _innermost_student_frame(rep.stack)


def _innermost_student_frame(stack: str) -> str:
    for m in _FRAME.finditer(stack):  # faulthandler lists the innermost frame first
        if "/src/" in m["file"] and "site-packages" not in m["file"]:
            return f" at {m['file'].rsplit('/', 1)[-1]}:{m['line']} in {m['fn']}"
    return ""


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
    ranks = [
        {k: rep.trace.get(k, 0) for k in ("rank", "sends", "recvs", "bytes_sent", "bytes_recv")} | {"rank": rep.rank}
        for rep in run.ranks
    ]
    summary: dict[str, Any] = {
        "ranks": ranks,
        "max_sends_per_rank": max((r["sends"] for r in ranks), default=0),
        "max_bytes_sent_per_rank": max((r["bytes_sent"] for r in ranks), default=0),
        "tensor_bytes": tensor_bytes,
        "collectives": sorted({c for rep in run.ranks for c in rep.trace.get("collectives", [])}),
        "student_functions": sorted({f for rep in run.ranks for f in rep.trace.get("student_functions", [])}),
    }
    if keep_events:
        events = [e for rep in run.ranks for e in rep.events if isinstance(e, dict)]
        summary["events"] = sorted(events, key=lambda e: (e.get("t", 0), e.get("rank", 0)))[:4000]
    return summary
