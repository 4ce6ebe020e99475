#!/usr/bin/env python3
"""Where a full grading's time goes (issue 23): docs/measurements.md's table, re-measured.

Grades each bundled reference ``--runs`` times, alternating between them, every isolation layer on,
and prints per reference the median wall time of the whole command, the median of each stage
``results.json`` records (intake, static checks, and the matrix session's phases from
``grader.matrix.timeline``), and the CPU time of every process of the grading (the command, the
session, the zygote and every rank), read from a cpuacct cgroup where this machine has one (root, cgroup
v1 or v2): that figure says how far two cores can go, whatever the wall time says.

    python3 scripts/bench-grade.py                 # a9, a4, hw12, a5; 3 runs each
    python3 scripts/bench-grade.py --runs 5 a9 a5  # some of them
    python3 scripts/bench-grade.py --isolation full,portable a9   # the isolations side by side (issue 21)
    python3 scripts/bench-grade.py --against before=/path/to/old-checkout/.venv/bin/python a9   # before/after

Measure on an idle machine: wall times move with the load, and only figures taken in one run of this
script compare.  With ``--against``, each run grades with every interpreter back to back, and the
wall times of each such pair are compared too: this machine's speed drifts by 20% within an hour,
and a pair taken a few seconds apart cancels most of that drift, which two medians do not.
"""

from __future__ import annotations

import argparse
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


def grade_once(pack: str, isolation: str, python: str, out: Path, cgroup: Path | None) -> dict[str, float]:
    cmd = [python, "-m", "grader", "grade", str(SUBMISSIONS[pack]), "--pack", pack, "--out", str(out)]
    cmd += ["--isolation", isolation]
    before = _cpu_seconds(cgroup) if cgroup else 0.0
    enter = (lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid()))) if cgroup else None
    t0 = time.monotonic()
    # from outside any checkout: `python -m grader` would import the one in its working directory
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, preexec_fn=enter, cwd=out.parent)
    wall = time.monotonic() - t0
    result = json.loads((out / "results.json").read_text())
    row = {"wall": wall, "cases": float(len(result["cases"])), "points": float(result["score"])}
    row |= {stage: float(result["timings"].get(stage, 0.0)) for stage in STAGES}
    if cgroup:
        row["cpu"] = _cpu_seconds(cgroup) - before
    return row


def compile_grader(python: str) -> None:
    """Bytecode for every module of the grader ``python`` runs, as a pip install leaves it: an editable
    checkout may lack it, and its first gradings would pay for compiling (not what is measured)."""
    code = "import compileall, grader, pathlib; compileall.compile_dir(pathlib.Path(grader.__file__).parent, quiet=1)"
    subprocess.run([python, "-c", code], check=True, cwd="/")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("packs", nargs="*", help=f"some of {', '.join(SUBMISSIONS)} (default: all of them)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--isolation", default="auto", help="isolations, alternated: auto, full, portable")
    parser.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="LABEL=PYTHON",
        help="also grade with the grader another interpreter imports (e.g. a venv of an older checkout), alternated",
    )
    args = parser.parse_args()
    isolations = args.isolation.split(",")
    pythons = {"": sys.executable} | dict(spec.split("=", 1) for spec in args.against)
    args.packs = args.packs or list(SUBMISSIONS)
    if unknown := set(args.packs) - set(SUBMISSIONS):
        parser.error(f"no bundled reference for {', '.join(sorted(unknown))}")
    for python in pythons.values():
        compile_grader(python)
    cgroup = _cpu_cgroup()

    def row_name(pack: str, isolation: str, who: str) -> str:
        words = [pack, *([isolation] if len(isolations) > 1 else [])]
        words += [f"({who or 'this'})"] if len(pythons) > 1 else []
        return " ".join(words)

    label = {(p, r, who): row_name(p, r, who) for p in args.packs for r in isolations for who in pythons}
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in label.values()}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-grade-") as tmp:
            for run in range(args.runs):
                for (pack, isolation, who), name in label.items():  # alternated: a change of load touches each alike
                    out = Path(tmp) / f"{pack}-{isolation}-{who}-{run}"
                    rows[name].append(grade_once(pack, isolation, pythons[who], out, cgroup))
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
    for (pack, isolation, who), name in label.items():  # each run's gradings ran back to back: compare them
        if not who:
            continue
        ours = rows[label[(pack, isolation, "")]]
        diffs = [a["wall"] - b["wall"] for a, b in zip(ours, rows[name], strict=True)]
        print(
            f"{row_name(pack, isolation, '')}, minus {who}, run by run: wall {statistics.median(diffs):+.2f} s "
            f"(median), from {min(diffs):+.2f} to {max(diffs):+.2f}; faster in {sum(d < 0 for d in diffs)} "
            f"of {len(diffs)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
