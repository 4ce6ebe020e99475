"""A memory verdict is a memory verdict (issue 24): a rank that filled its memory cgroup slowly and
then ran out of time is ``memory``, with the figures, when the cgroup recorded reaching its limit."""

from __future__ import annotations

from pathlib import Path

from grader.matrix.verdicts import decide
from grader.pack import Case, Prepared
from grader.results import Verdict
from grader.runtimes.torchdist.runs import CaseRun, RankReport
from grader.sandbox.cgroups import GroupCgroups

CASE = Case("test_x", "ws2", 2, "x")
PREPARED = Prepared([{}, {}], [{}, {}])


def timed_out(**fields: object) -> CaseRun:
    ranks = [RankReport(0, "hang", blocked_in="running"), RankReport(1, "hang", blocked_in="recv(src=0)")]
    return CaseRun(ranks, 3.0, hang="timeout", **fields)  # type: ignore[arg-type]


def test_a_hang_after_the_cgroup_reached_its_limit_is_memory_with_the_figures() -> None:
    figure = "reached its memory limit (2048 MiB) 37 time(s), 2302 MiB at most"
    decision = decide(CASE, PREPARED, timed_out(memory_pressure={0: figure}))
    assert decision.verdict is Verdict.MEMORY
    assert decision.message == f"memory limit exceeded: rank 0 {figure}, and the case then ran out of time (timeout)"


def test_an_oom_kill_during_a_case_that_then_hung_is_memory() -> None:
    decision = decide(CASE, PREPARED, timed_out(memory_kills=[1]))
    assert decision.verdict is Verdict.MEMORY and "rank 1 was killed by the kernel" in decision.message


def test_a_hang_without_memory_pressure_stays_a_hang() -> None:
    assert decide(CASE, PREPARED, timed_out()).verdict is Verdict.HANG


def test_the_cgroup_counters_are_read_in_both_versions(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v1 / "memory.failcnt").write_text("12\n")
    (v1 / "memory.max_usage_in_bytes").write_text(str(2100 << 20))
    (v2 / "memory.events").write_text("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n")
    (v2 / "memory.peak").write_text(str(3 << 30))
    one = GroupCgroups(1, tmp_path, tmp_path, [v1], [])
    two = GroupCgroups(2, tmp_path, tmp_path, [v2], [])
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    assert (one.memory_events(0), one.peak_mb(0)) == ((2, 12), 2100)
    assert (two.memory_events(0), two.peak_mb(0)) == ((1, 6), 3072)
    (v1 / "memory.failcnt").unlink()  # a kernel without the counter: nothing recorded, never an error
    (v1 / "memory.oom_control").unlink()
    assert one.memory_events(0) == (0, 0)
