#!/usr/bin/env python3
"""Where a full grading's time goes (issue 23): README's Measurements table, re-measured.

Grades each bundled reference ``--runs`` times, alternating between them, every isolation layer on,
and prints per reference the median wall time of the whole command, the median of each stage
``results.json`` records (intake, static checks, and the matrix session's phases from
``grader.matrix.timeline``), and the CPU time of every process of the grading (the command, the
session, the zygote and every rank), read from a cpuacct cgroup where this machine has one (root, cgroup
v1 or v2): that figure says how far two cores can go, whatever the wall time says.

    python3 scripts/bench-grade.py                 # a9, a4, hw12, a5; 3 runs each
    python3 scripts/bench-grade.py --runs 5 a9 a5  # some of them
    python3 scripts/bench-grade.py --isolation full,portable a9   # the runtimes side by side (issue 21)

Measure on an idle machine: wall times move with the load, and only figures taken in one run of this
script compare.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUBMISSIONS = {  # pack -> what is graded
    "a9": REPO / "reference" / "a9",
    "a4": REPO / "reference" / "a4",
    "hw12": REPO / "reference" / "hw12",
    "a5": REPO / "reference" / "a5",
}
STAGES = (
    "intake",
    "static",
    "matrix.startup",
    "matrix.groups",
    "matrix.cases",
    "matrix.between",
    "matrix.teardown",
    "matrix.exit",
    "score",
)


def _cpu_cgroup() -> Path | None:
    """A fresh cpuacct (v1) or cpu-controller (v2) cgroup to run a grading in, if we may make one."""
    for root, usage in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"), ("/sys/fs/cgroup", "cpu.stat")):
        if (Path(root) / usage).exists() and os.access(root, os.W_OK):
            path = Path(root) / f"grader-bench-{os.getpid()}"
            path.mkdir(exist_ok=True)
            return path
    return None


def _cpu_seconds(cgroup: Path) -> float:
    if (cgroup / "cpuacct.usage").exists():
        return int((cgroup / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (cgroup / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def grade_once(pack: str, isolation: str, out: Path, cgroup: Path | None) -> dict[str, float]:
    cmd = [sys.executable, "-m", "grader", "grade", str(SUBMISSIONS[pack]), "--pack", pack, "--out", str(out)]
    cmd += ["--isolation", isolation]
    before = _cpu_seconds(cgroup) if cgroup else 0.0
    enter = (lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, preexec_fn=enter, cwd=REPO)
    wall = time.monotonic() - t0
    result = json.loads((out / "results.json").read_text())
    row = {"wall": wall, "cases": float(len(result["cases"])), "points": float(result["score"])}
    row |= {stage: float(result["timings"].get(stage, 0.0)) for stage in STAGES}
    if cgroup:
        row["cpu"] = _cpu_seconds(cgroup) - before
    return row


def compile_grader() -> None:
    """Bytecode for every module of the grader that runs, as a pip install leaves it: an editable
    checkout may lack it, and its first gradings would pay for compiling (not what is measured)."""
    spec = importlib.util.find_spec("grader")
    assert spec is not None and spec.origin is not None, "the grader is not importable here"
    compileall.compile_dir(Path(spec.origin).parent, quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("packs", nargs="*", help=f"some of {', '.join(SUBMISSIONS)} (default: all of them)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--isolation", default="auto", help="runtimes, alternated: auto, full, portable")
    args = parser.parse_args()
    runtimes = args.isolation.split(",")
    args.packs = args.packs or list(SUBMISSIONS)
    if unknown := set(args.packs) - set(SUBMISSIONS):
        parser.error(f"no bundled reference for {', '.join(sorted(unknown))}")
    compile_grader()
    cgroup = _cpu_cgroup()
    label = {(p, r): p if len(runtimes) == 1 else f"{p} {r}" for p in args.packs for r in runtimes}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in label.values()}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
            for run in range(args.runs):
                for (pack, runtime), name in label.items():  # alternated: a change of load touches each alike
                    out = Path(tmp) / f"{pack}-{runtime}-{run}"
                    rows[name].append(grade_once(pack, runtime, out, cgroup))
    finally:
        if cgroup is not None:
            cgroup.rmdir()
    columns = ["cases", "points", "wall", *(["cpu"] if cgroup else []), *STAGES]
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; medians of {args.runs} runs, seconds")
    print("| pack | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, runs in rows.items():
        medians = {c: statistics.median(r[c] for r in runs) for c in columns}
        cells = [f"{v:g}" if c in ("cases", "points") else f"{v:.2f}" for c, v in medians.items()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
