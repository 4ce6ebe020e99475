"""Measure what grading on Dask costs (README's Measurements, issue 22).

A synthetic A9 class of N students (reference, naive, template, broken and one hanging submission) is
graded three times, one run after the other: ``grader batch --jobs 2``, ``--cluster local:2`` and, where
a test Slurm can be started (root, Debian's slurm-wlm and munge: tests/slurm.py), ``--cluster slurm``
with one-core jobs, two at most.  Prints each run's wall time, the seconds its grades took (summed from
batch-outcome.json) and the overhead per student against the local run.

    python scripts/bench-cluster.py [N]      # N = 20 by default
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

MIX = [  # (name, tree, share of the class)
    ("ring", REPO / "reference" / "a9", 0.40),
    ("star", REPO / "reference" / "a9-naive", 0.25),
    ("template", REPO / "student_template" / "a9", 0.20),
    ("broken", REPO / "tests" / "corpus" / "hostile" / "syntax_error", 0.15),
]
HANGING = REPO / "tests" / "corpus" / "hostile" / "deadlock_allreduce"


def build(root: Path, n: int) -> Path:
    roster = root / "class"
    ignore = shutil.ignore_patterns("__pycache__", "expected.json", ".github")
    shutil.copytree(HANGING, roster / "hanging", ignore=ignore)
    left = n - 1
    for kind, tree, share in MIX:
        count = left if kind == MIX[-1][0] else round((n - 1) * share)
        for i in range(count):
            shutil.copytree(tree, roster / f"{kind}{i:03d}", ignore=ignore)
        left -= count
    return roster


def timed(roster: Path, out: Path, *options: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, seconds the grades themselves took)."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out), *options],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"grader batch {' '.join(options)} failed:\n{done.stderr[-3000:]}")
    grades = sum(json.loads(p.read_text())["seconds"] for p in out.glob("students/*/batch-outcome.json"))
    return wall, grades


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    try:
        roster = build(work, n)
        print(f"class: {n} students in {roster}")
        runs = {"--jobs 2": timed(roster, work / "local", "--jobs", "2")}
        runs["--cluster local:2"] = timed(roster, work / "dask", "--cluster", "local:2")
        from slurm import running_slurm, unavailable

        why = unavailable()
        if why:
            print(f"--cluster slurm: skipped ({why})")
        else:
            config = work / "slurm.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "queue": "grading",
                        "cores": 1,
                        "processes": 1,
                        "memory": "4GB",
                        "walltime": "01:00:00",
                        "python": sys.executable,
                        "log_directory": str(work / "jobs"),
                        "scheduler_options": {"host": "127.0.0.1", "dashboard_address": ":0"},
                        "max_jobs": 2,
                    }
                )
            )
            import os

            with running_slurm() as slurm:
                env = {**os.environ, **slurm.env}
                runs["--cluster slurm"] = timed(
                    roster, work / "slurm", "--cluster", "slurm", "--cluster-config", str(config), env=env
                )
            jobs = len(list((work / "jobs").glob("*.err")))
            print(f"slurm jobs started: {jobs}")
        base = runs["--jobs 2"][0]
        for name, (wall, grades) in runs.items():
            print(
                f"{name:20s} wall {wall:7.1f} s  grades {grades:7.1f} s  "
                f"overhead vs --jobs 2: {(wall - base) / n:+.2f} s/student ({(wall / base - 1) * 100:+.1f}%)"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
