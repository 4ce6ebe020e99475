"""A hanging function costs seconds, not minutes (issue 16).

The rule: once a function hangs at a world size, its other cases at that world size are
``not_run`` (failed, without running); other world sizes and other functions still run, so a
function that hangs only at some world sizes keeps the points of the others.  Each case's time
budget fits the case (``grader.matrix.budgets``), so a slow but correct solution still passes, and a
hang says whether each rank was spinning, idle, or blocked in a receive.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.junit import read_junit
from grader.matrix.budgets import CALIBRATION_BYTES, FLOWING_S, MAX_STRETCH, case_budget, grace_over, out_of_time
from grader.packs.a9 import catalog
from grader.runner import run_matrix
from grader.runtimes.torchdist import procfs
from grader.runtimes.torchdist.runs import FAILURE_GRACE_S

ROOT = Path(__file__).resolve().parent.parent
FILES = ["src/collectives.py", "src/transformer.py"]
POLICY = {"src/transformer.py": ["all_reduce", "all_gather"]}  # the rubric's policy.allow
LIMITS = SimpleNamespace(case_timeout_s=10.0, case_timeout_floor_s=1.0, case_timeout_multiple=50.0)


def sandbox(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    box = tmp_path / "sandbox"
    (box / "src").mkdir(parents=True)
    (box / "src" / "__init__.py").write_text("")
    for name in FILES:
        text = (ROOT / "reference" / "a9" / name).read_text()
        if name in edits:
            old, new = edits[name]
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        (box / name).write_text(text)
    return box


def verdicts(tmp_path: Path, box: Path, only: list[str]) -> dict[str, tuple[str, str]]:
    isolation_config = {"sandbox": str(box), "memory_mb": 2048, "nproc": 64, "cpu_s": 60, "file_size_mb": 64}
    run = run_matrix(
        box, FILES, tmp_path / "work", {}, POLICY, salt="t", pack="a9", isolation_config=isolation_config, only=only
    )
    return {name: (case.verdict.value, case.message) for name, case in read_junit(run.junit).items()}


def body_start(function: str, insert: str) -> tuple[str, str]:
    """An edit that runs ``insert`` first thing in the reference's ``function`` (after its docstring)."""
    source = (ROOT / "reference" / "a9" / "src" / "collectives.py").read_text()
    match = re.search(rf'def {function}\(.*?\) -> torch\.Tensor:\n    """.*?"""\n', source, re.DOTALL)
    assert match is not None
    return match.group(0), match.group(0) + insert


# --------------------------------------------------------------------------- budgets


def test_a_budget_is_the_floor_plus_a_multiple_of_what_the_graders_collective_needs() -> None:
    assert case_budget(LIMITS, 0.004, 80) == pytest.approx(1.2)  # a small case: 1 + 50 x 4 ms
    assert case_budget(LIMITS, 0.004, 8 * CALIBRATION_BYTES) == pytest.approx(2.6)  # eight times the bytes
    assert case_budget(LIMITS, 0.05, 64 * CALIBRATION_BYTES) == 10.0  # never above case_timeout_s
    assert case_budget(LIMITS, None, 80) == 10.0  # no calibration: the ceiling


def test_a_case_is_stopped_when_it_used_its_own_time_not_the_machines() -> None:
    """Past its budget, a case is stopped once its own share of the machine used the budget up; other
    programs' share is given back, up to MAX_STRETCH times the budget; a case whose messages are still
    crossing the wire runs on to the ceiling; nothing runs past the ceiling (issue 43)."""
    budget, quiet, flowing = 1.5, float("inf"), FLOWING_S / 2

    def own(share: float) -> Callable[[float], float]:  # the case had ``share`` of the machine
        return lambda wall: wall * share

    assert not out_of_time(LIMITS, budget, 1.4, own(0.1), quiet)  # within the budget, whatever the load
    assert out_of_time(LIMITS, budget, 1.6, own(1.0), quiet)  # an idle machine: the budget is wall time
    assert not out_of_time(LIMITS, budget, 2.9, own(0.5), quiet)  # others took half: 1.45 s were its own
    assert out_of_time(LIMITS, budget, 3.1, own(0.5), quiet)
    assert out_of_time(LIMITS, budget, budget * MAX_STRETCH + 0.1, own(0.01), quiet)  # a loaded machine's cap
    assert not out_of_time(LIMITS, budget, 9.9, own(1.0), flowing)  # still exchanging: up to the ceiling
    assert out_of_time(LIMITS, budget, 10.1, own(0.01), flowing)
    assert out_of_time(LIMITS, 12.0, 12.1, own(0.01), flowing)  # a budget at the ceiling ends there


def test_the_failure_grace_counts_the_ranks_own_time_too() -> None:
    """Once one rank failed, the others get FAILURE_GRACE_S of their own time to report, not of the wall
    clock: time a rank waited for a CPU a neighbour held is given back, up to the case's ceiling (issue
    58: a starved rank missed 0.3 s of wall clock, and a template's not_implemented became a crash)."""
    grace, ceiling = FAILURE_GRACE_S, LIMITS.case_timeout_s

    def own(starved: float) -> Callable[[float], float]:  # the ranks waited for a CPU this part of the time
        return lambda wall: wall * (1 - starved)

    assert not grace_over(grace, grace * 0.9, own(0.0), ceiling)  # within the grace, whatever the load
    assert grace_over(grace, grace * 1.1, own(0.0), ceiling)  # nothing starved them: the grace is wall time
    assert not grace_over(grace, grace * 1.9, own(0.5), ceiling)  # half the time they waited for a CPU
    assert grace_over(grace, grace * 2.1, own(0.5), ceiling)
    assert not grace_over(grace, ceiling - 0.1, own(1.0), ceiling)  # starved throughout: up to the ceiling
    assert grace_over(grace, ceiling + 0.1, own(1.0), ceiling)


def test_a_ranks_own_time_is_the_wall_time_less_what_it_waited_for_a_cpu() -> None:
    """What the grace counts, read from the kernel for live processes: a process that sleeps waits for
    no CPU, so its time is its own; a process gone or unknown gives back nothing."""
    sleep = "import time; print('asleep', flush=True); time.sleep(30)"
    sleeper = subprocess.Popen([sys.executable, "-c", sleep], stdout=subprocess.PIPE)
    try:
        assert sleeper.stdout is not None and sleeper.stdout.readline() == b"asleep\n"  # its start is behind it
        clock = procfs.Unstarved([sleeper.pid, 999_999_999])
        time.sleep(0.2)
        assert clock.seconds(0.2) == pytest.approx(0.2, abs=0.05)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_time_a_process_waited_for_a_cpu_is_not_its_own() -> None:
    """Twice as many spinners as cores: each waits for a CPU about half the time, read as the session
    reads it, a poll at a time (the kernel counts a wait only once it ends; a wait still going is seen
    by the polls)."""
    spin = [sys.executable, "-c", "while True: pass"]
    spinners = [subprocess.Popen(spin) for _ in range(2 * (os.cpu_count() or 1))]
    try:
        time.sleep(0.5)  # their start is behind them
        clock, began = procfs.Unstarved([p.pid for p in spinners]), time.monotonic()
        while time.monotonic() - began < 1.0:
            own = clock.seconds(time.monotonic() - began)
            time.sleep(0.02)
        assert own < 0.8 * (time.monotonic() - began)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


# --------------------------------------------------------------------------- the skip rule

SPIN_AT_WS3 = body_start("my_allgather", "    while dist.get_world_size() == 3:\n        pass\n")


def test_a_hang_at_one_world_size_skips_the_rest_of_that_world_size_only(tmp_path: Path) -> None:
    only = [c for c in catalog.all_case_ids() if re.match(r"test_(allgather|broadcast)\[ws[23]-", c)]
    results = verdicts(tmp_path, sandbox(tmp_path, {"src/collectives.py": SPIN_AT_WS3}), only)
    allgather_ws3 = [c for c in only if c.startswith("test_allgather[ws3-")]
    first, rest = allgather_ws3[0], allgather_ws3[1:]
    assert results[first][0] == "hang"
    skipped = ("not_run", f"my_allgather already hung at world size 3, in {first}")
    assert rest and all(results[c] == skipped for c in rest)
    # other world sizes and other functions still run, and earn their points
    others = [c for c in only if c not in allgather_ws3]
    assert {results[c][0] for c in others} == {"pass"}


def test_a_hang_says_whether_each_rank_was_spinning_idle_or_blocked(tmp_path: Path, load: str) -> None:
    sleeps = body_start("my_broadcast", "    if dist.get_rank() == 0:\n        __import__('time').sleep(3600)\n")
    only = ["test_allgather[ws3-float32-4x5]", "test_broadcast[ws2-src1-float32-4x5]"]
    box = sandbox(tmp_path, {"src/collectives.py": SPIN_AT_WS3})
    text = (box / "src" / "collectives.py").read_text()
    (box / "src" / "collectives.py").write_text(text.replace(*sleeps))
    results = verdicts(tmp_path, box, only)
    spin_verdict, spin = results[only[0]]
    assert spin_verdict == "hang"
    assert spin.startswith("timed out after ")
    assert re.search(r"rank \d is spinning \(\d+% CPU\) at collectives\.py:\d+ in my_allgather", spin), spin
    idle_verdict, idle = results[only[1]]
    assert idle_verdict == "hang"
    # rank 0 sleeps (idle: a sleeping rank uses next to no CPU); rank 1, the source, waits to hand it the data
    sleeping = r"rank 0 is idle \(\d% CPU\), in no send or receive .* at collectives\.py:\d+ in my_broadcast"
    assert re.search(sleeping, idle), idle
    assert re.search(r"rank 1 waits in send\(dst=0\) at collectives\.py:\d+ in my_broadcast \(blocked, \d% CPU\)", idle)


# --------------------------------------------------------------------------- slow but correct

TEN_TIMES = "    for _ in range(9):  # ten times the work: slow, and still right\n        _ring_allreduce(t.clone())\n"


def test_a_correct_solution_ten_times_slower_than_the_reference_still_passes(tmp_path: Path, load: str) -> None:
    source = (ROOT / "reference" / "a9" / "src" / "collectives.py").read_text()
    old = "def my_allreduce(tensor: torch.Tensor) -> torch.Tensor:\n"
    assert source.count(old) == 1
    slow = source.replace(old, "def _ring_allreduce(tensor: torch.Tensor) -> torch.Tensor:\n")
    slow += f"\n\n{old}    t = tensor\n{TEN_TIMES}    return _ring_allreduce(tensor)\n"
    only = [c for c in catalog.all_case_ids() if re.match(r"test_allreduce\[ws[248]-", c)]
    assert "test_allreduce[ws4-float32-large1M]" in only
    box = sandbox(tmp_path, {})
    (box / "src" / "collectives.py").write_text(slow)
    results = verdicts(tmp_path, box, only)
    assert {verdict for verdict, _ in results.values()} == {"pass"}, results


# --------------------------------------------------------------------------- threads left after a case


def test_a_rank_whose_reply_already_fails_the_case_is_not_waited_for_but_a_thread_on_its_way_out_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The session counts each rank's threads from /proc after a case.  A count above the one at ready is
    read again for up to ``LINGER_S``, since a thread the case joined may still be leaving; but a rank
    whose reply fails the case as a hang or worse (a crash; HW12's threads stuck on a lock) is read once
    (``tests/test_verdicts.py``: its count cannot change the verdict).  Rank 0 is such a rank; rank 1's
    extra thread leaves on the third read."""
    from grader.runtimes.torchdist import launcher

    counts = {100: iter([5, 5, 5]), 101: iter([4, 4, 3])}
    reads: list[int] = []

    def threads(pid: int) -> int:
        reads.append(pid)
        return next(counts[pid])

    monkeypatch.setattr(launcher.procfs, "threads", threads)
    monkeypatch.setattr(launcher.time, "sleep", lambda seconds: None)
    group = object.__new__(launcher.RankGroup)
    group._ranks = [SimpleNamespace(pid=100), SimpleNamespace(pid=101)]  # type: ignore[list-item]
    group._threads = [3, 3]
    assert group._threads_left(settled={0}) == {0: 2}
    assert reads == [100, 101] * 3  # until rank 1's thread had left, not until the linger ran out

    counts.update({100: iter([5]), 101: iter([3])})
    reads.clear()
    assert group._threads_left(settled={0}) == {0: 2}
    assert reads == [100, 101]  # only the settled rank is above its count: read once
