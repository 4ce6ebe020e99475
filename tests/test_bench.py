"""``grader bench`` measures what issue 23 states its goal in: the same cases under the course's
launcher and under ours, then the whole grading per case.  Its figures are benchmarks (docs/measurements.md's
Measurements), never asserted here; what is asserted is that it measures what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bench_runs_the_same_cases_under_both_launchers_and_times_a_whole_grading() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "grader", "bench", str(REPO / "reference" / "a9"), "--cases", "1"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    row = re.compile(r"^([^\d\n]+?) +(\d+) +([\d.]+) +[\d.]+$", re.M)  # launcher, cases, seconds, s/case
    rows = {m[1]: (int(m[2]), float(m[3])) for m in row.finditer(done.stdout)}
    assert rows["spawn per case + TCP port"][0] == rows["grader RankGroup (fork)"][0] == 1
    assert rows["grader grade, the whole grading"][0] == 264  # every case of A9's matrix
    assert "(1/1 cases passed under ours)" in done.stdout
    assert re.search(r"^per-case speed-up of the whole grading: [\d.]+x$", done.stdout, re.M)
