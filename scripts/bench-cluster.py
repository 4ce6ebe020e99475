"""Measure what grading a class on Dask and Slurm costs (docs/measurements.md, issue 22).

    python scripts/bench-cluster.py                       # 100 students, every mode: run it on an idle machine
    python scripts/bench-cluster.py --students 6          # a quick check that every mode works
    python scripts/bench-cluster.py --modes jobs,local    # without Slurm
    python scripts/bench-cluster.py --modes cold,jobs     # warm host server against a torch import per grade
    python scripts/bench-cluster.py --modes local-cold,local  # the same on Dask workers
    python scripts/bench-cluster.py --modes cold,jobs --rounds 3  # alternated: this machine drifts by 20%

One synthetic A9 class is graded by each mode in turn, each into a fresh output directory (so no mode
finds another's cache): ``cold`` is ``grader batch --jobs 2 --cold-hosts`` (each grade starts its session
host cold: one ``grader grade`` per student, two at a time, as before issue 41), ``jobs`` is
``grader batch --jobs 2`` (its grades' hosts forked from one warm host server), ``local`` is ``--cluster local:2``
(each worker's grades fork their hosts from that worker's server; ``local-cold`` with ``--cold-hosts``) and
``slurm`` is ``--cluster slurm`` on the single-node Slurm of ``tests/slurm.py`` (started here when this
machine can run it: root, ``scripts/install-slurm.sh``; stopped by pid at the end).  All three run two
gradings at once: ``--jobs 2``; two LocalCluster workers of one thread; two Slurm jobs of one core and
one Dask worker each (``max_jobs: 2``).  Slurm books one CPU per job only so that both jobs fit on this
2-CPU node: with ``task/none`` and no cgroups nothing confines a job to its CPU, so each grading may
use both cores exactly as under ``--jobs 2``, and the comparison is like for like.

The class (deterministic): student ``s{i:03d}-{kind}``; the one in the middle (i = N // 2) hangs
(``tests/corpus/hostile/deadlock_allreduce``: its allreduce deadlocks, so its grade waits out hang
budgets); the others take the kinds of ``PATTERN`` in turn, so a small class is mixed too.  For 100
students: 39 ``reference/a9``, 25 ``reference/a9-naive``, 20 ``student_template/a9``, 10 with a syntax
error (``tests/corpus/hostile/syntax_error``), 5 whose ``collectives.py`` imports a module that does
not exist (the reference otherwise), 1 hanging.

Printed (Markdown, for docs/measurements.md): each mode's wall time, seconds per student, the seconds
the gradings themselves took (batch-outcome.json) and the overhead against ``--jobs 2``; whether the
gradebooks agree (every student's row, every column); the client's own cost per student (the first
mode's batch run again: every student cached, so only cache keys, rescoring and reports); Slurm's
per-job overhead; and the on-paper estimate for a large class on a cluster (``estimate``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from slurm import PARTITION, running_slurm, unavailable  # noqa: E402  (tests/ is not a package)

HOSTILE = REPO / "tests" / "corpus" / "hostile"
TREES = {
    "reference": REPO / "reference" / "a9",
    "naive": REPO / "reference" / "a9-naive",
    "template": REPO / "student_template" / "a9",
    "syntax-error": HOSTILE / "syntax_error",
    "import-error": REPO / "reference" / "a9",  # plus the import below
    "hanging": HOSTILE / "deadlock_allreduce",
}
BROKEN_IMPORT = "import no_such_module_for_this_course  # a leftover of the student's own experiments\n"
PATTERN = (  # 8 reference, 5 naive, 4 template, 2 syntax errors, 1 import error in every 20
    *("reference", "naive", "template", "syntax-error", "import-error"),
    *("reference", "naive", "reference", "template", "reference"),
    *("naive", "reference", "template", "syntax-error", "reference"),
    *("naive", "reference", "template", "naive", "reference"),
)
MODES = {  # name: (label, grader batch options); each runs two gradings at once
    "cold": ("--jobs 2 --cold-hosts", ["--jobs", "2", "--cold-hosts"]),  # each grade imports torch in its host
    "jobs": ("--jobs 2", ["--jobs", "2"]),
    "local-cold": ("--cluster local:2 --cold-hosts", ["--cluster", "local:2", "--cold-hosts"]),
    "local": ("--cluster local:2", ["--cluster", "local:2"]),  # each worker's grades fork from its host server
    "slurm": ("--cluster slurm", ["--cluster", "slurm"]),
}
SLOTS = 2  # gradings at once in every mode
SLURM_JOBS = SLOTS  # one grading each: the concurrency of --jobs 2
JOB_NAME = "grader-bench"  # our worker jobs, not the fixture's `srun hostname`
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Registered to:", re.M)  # Dask's log-format


@dataclass
class Run:
    """One mode's batch: its wall time and what its output directory says."""

    label: str
    wall: float
    grades: dict[str, float]  # student: seconds its grading took (batch-outcome.json)
    gradebook: dict[str, dict[str, str]]  # student: gradebook.csv row
    cpu: float = 0.0  # the machine's busy CPU-seconds over the batch (/proc/stat): less of its drift than wall

    @property
    def graded(self) -> float:
        return sum(self.grades.values())


@dataclass
class SlurmJob:
    """A Dask worker job: when Slurm took it, started it, and when its worker joined the scheduler."""

    job_id: str
    submitted: float
    started: float
    registered: float | None = field(default=None)


def build(roster: Path, students: int) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "expected.json", ".github")
    others = iter(PATTERN[i % len(PATTERN)] for i in range(students))
    for i in range(students):
        kind = "hanging" if i == students // 2 else next(others)
        tree = roster / f"s{i:03d}-{kind}"
        shutil.copytree(TREES[kind], tree, ignore=ignore)
        if kind == "import-error":
            module = tree / "src" / "collectives.py"
            module.write_text(BROKEN_IMPORT + module.read_text())


def batch(roster: Path, out: Path, label: str, options: list[str], env: dict[str, str], log: Path) -> Run:
    print(f"bench-cluster: grading {roster} with {label} ...", file=sys.stderr, flush=True)
    start, busy = time.monotonic(), _busy()
    with log.open("w") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out), *options],
            stdout=stderr,
            stderr=stderr,
            env=env,
            check=False,
        )
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"grader batch {' '.join(options)} failed ({done.returncode}):\n{log.read_text()[-3000:]}")
    grades = {p.parent.name: json.loads(p.read_text())["seconds"] for p in out.glob("students/*/batch-outcome.json")}
    with (out / "gradebook.csv").open(newline="") as fh:
        gradebook = {row["student"]: row for row in csv.DictReader(fh)}
    return Run(label, wall, grades, gradebook, _busy() - busy)


def _busy() -> float:
    """This machine's busy CPU-seconds so far, all cores (user, nice, system, irq, softirq, steal)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def slurm_config(work: Path) -> Path:
    """SLURMCluster's options for this node (module docstring: why one core per job)."""
    config = {
        "queue": PARTITION,
        "job_name": JOB_NAME,
        "cores": 1,  # one grading per job ...
        "processes": 1,  # ... in one Dask worker of one thread
        "memory": "4GB",
        "walltime": "12:00:00",  # a job grades until no student is left for it: longer than any class here
        "python": sys.executable,
        "job_script_prologue": [f"cd {work}"],
        "log_directory": str(work / "jobs"),
        "scheduler_options": {"host": "127.0.0.1", "dashboard_address": ":0"},
        "max_jobs": SLURM_JOBS,
    }
    path = work / "slurm.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def slurm_jobs(env: dict[str, str], logs: Path) -> list[SlurmJob]:
    """Every worker job Slurm still remembers, with its worker's log.  Slurm forgets a job ``MinJobAge``
    (300 s) after its end: the jobs end with the batch, unless adaptive scaling retired one earlier.

    Slurm's times have one-second resolution; Dask's log lines have milliseconds, in local time too."""
    out = subprocess.run(["scontrol", "-o", "show", "job"], env=env, capture_output=True, text=True, check=True)
    jobs = []
    for line in out.stdout.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if fields.get("JobName") != JOB_NAME or fields.get("StartTime", "Unknown") in ("Unknown", "None"):
            continue
        job = SlurmJob(fields["JobId"], _epoch(fields["SubmitTime"], "%Y-%m-%dT%H:%M:%S"), 0.0)
        job.started = _epoch(fields["StartTime"], "%Y-%m-%dT%H:%M:%S")
        for log in logs.glob(f"*-{job.job_id}.err"):
            found = LOG_TIME.search(log.read_text(errors="replace"))
            if found:
                job.registered = _epoch(found.group(1), "%Y-%m-%d %H:%M:%S,%f")
        jobs.append(job)
    return sorted(jobs, key=lambda j: int(j.job_id))


def _epoch(text: str, form: str) -> float:
    return datetime.strptime(text, form).timestamp()  # local time, as both Slurm and Dask write it


def estimate(args: argparse.Namespace, base: Run, fixed: float, client: float, per_job: float | None) -> list[str]:
    """docs/measurements.md's formula for a class of ``--class-size`` on ``--nodes`` of ``--cores-per-node``:

        T  ~  Q + D + J + N g / S + g_max + F + N r

    Q  Slurm's queue wait for the jobs (the site's, not measured: 0 on an idle partition)
    D  pulling the grader image on each node, --backend docker only (not measured: 0 with local)
    J  a job's start: sbatch to its Dask worker registered (measured here; the jobs start together)
    g  mean seconds of one grading while every core runs one (measured: --jobs 2 on 2 cores)
    S  gradings at once: nodes x cores per node, one per core as measured here
    g_max  the longest grading (the hanging one): the tail of the last wave (Graham's bound)
    F, r  the client's own start-up and seconds per student, serial: cache keys, rescoring, reports
    """
    n, slots, j = args.class_size, args.nodes * args.cores_per_node, per_job or 0.0
    g, g_max = base.graded / len(base.grades), max(base.grades.values())
    total = j + n * g / slots + g_max + fixed + n * client
    local = n * base.wall / len(base.grades) / 3600
    return [
        f"On paper, N = {n} students on {args.nodes} nodes of {args.cores_per_node} cores (S = {slots}), "
        f"from {base.label}" + ("" if per_job else " (J: no Slurm run, taken as 0)") + ":",
        f"T ~ Q + D + J + N*g/S + g_max + F + N*r = Q + D + {j:.1f} + {n}*{g:.2f}/{slots} + {g_max:.1f} + "
        f"{fixed:.1f} + {n}*{client:.3f}",
        f"  = Q + D + {j:.1f} + {n * g / slots:.1f} + {g_max:.1f} + {fixed:.1f} + {n * client:.1f} = Q + D + "
        f"{total:.0f} s ({total / 60:.1f} min), against {local:.1f} h for {base.label} on one 2-core machine",
    ]


def table(runs: list[Run], base: Run, students: int) -> list[str]:
    """One row per mode.  ``idle slot s``: wall - gradings' own / 2, the time the two grading slots
    were not grading (start-up, scheduling, the tail's one slot left alone): the mode's overhead
    without the gradings' own run-to-run noise, which on a loaded machine is larger than Dask's."""
    lines = [
        f"| mode | students | wall s | s/student | CPU s | gradings' own s | idle slot s | vs `{base.label}`: "
        "total s | per student s | % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        extra = run.wall - base.wall
        vs = f"{extra:+.1f} | {extra / students:+.2f} | {(run.wall / base.wall - 1) * 100:+.1f}%"
        lines.append(
            f"| `{run.label}` | {students} | {run.wall:.1f} | {run.wall / students:.2f} | {run.cpu:.0f} | "
            f"{run.graded:.1f} | {run.wall - run.graded / SLOTS:.1f} | {' | |' if run is base else vs} |"
        )
    return lines


def warm_against_cold(by_mode: dict[str, list[Run]]) -> list[str]:
    """Each cold mode's wall time over its warm mode's, round by round (issue 41 asks 1.6 for ``--jobs 2``)."""
    lines = []
    for cold, warm in (("cold", "jobs"), ("local-cold", "local")):
        pairs = list(zip(by_mode.get(cold, []), by_mode.get(warm, []), strict=False))  # a mode may be absent
        for what, of in (("wall", lambda run: run.wall), ("CPU", lambda run: run.cpu)):
            each = [of(c) / of(w) for c, w in pairs]
            if each:
                lines.append(
                    f"`{MODES[cold][0]}` / `{MODES[warm][0]}`, {what}: {', '.join(f'{x:.2f}x' for x in each)}"
                    + (f" (median {statistics.median(each):.2f}x)" if len(each) > 1 else "")
                )
    return lines


def agreement(runs: list[Run]) -> str:
    base = runs[0]
    if len(runs) < 2:
        return "Gradebooks: one mode, nothing to compare."
    differ = [
        f"{student} ({run.label}: {run.gradebook.get(student)} vs {row})"
        for run in runs[1:]
        for student, row in base.gradebook.items()
        if run.gradebook.get(student) != row
    ]
    missing = [run.label for run in runs if set(run.gradebook) != set(base.gradebook)]
    if differ or missing:
        return "Gradebooks DIFFER: " + "; ".join(differ + [f"{label}: other students" for label in missing])
    return f"Gradebooks agree: all {len(base.gradebook)} rows identical, every column, across {len(runs)} modes."


def slurm_lines(jobs: list[SlurmJob], students: int) -> tuple[list[str], float | None]:
    """Per job: queue wait (submit -> start, Slurm's clock) and start (-> Dask worker registered)."""
    lines = ["| Slurm job | queue wait s | start to worker registered s | sbatch to registered s |"]
    lines.append("|---|---|---|---|")
    overheads = []
    for job in jobs:
        ready = "" if job.registered is None else f"{job.registered - job.started:.1f}"
        whole = "" if job.registered is None else f"{job.registered - job.submitted:.1f}"
        if job.registered is not None:
            overheads.append(job.registered - job.submitted)
        lines.append(f"| {job.job_id} | {job.started - job.submitted:.0f} | {ready} | {whole} |")
    if not overheads:
        return [*lines, "\nno worker log says when it registered: J not measured"], None
    per_job = sum(overheads) / len(overheads)
    ramp = max(j.registered or 0.0 for j in jobs) - min(j.submitted for j in jobs)
    lines.append(
        f"\n{len(jobs)} jobs for {students} students; per-job overhead J (sbatch to worker registered, mean): "
        f"{per_job:.1f} s, paid once per job, by the jobs side by side: about {per_job / students:.2f} s per "
        f"student of wall time here; first sbatch to last worker registered: {ramp:.1f} s (dask-jobqueue's "
        "adaptive scaling submits the jobs in turn). The worker's one `import torch, grader` check comes after, "
        "as on local:2."
    )
    return lines, per_job


def _size(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--students", type=int, default=100)
    parser.add_argument("--modes", default="cold,jobs,local,slurm", help="comma-separated: " + ", ".join(MODES))
    parser.add_argument("--class-size", type=int, default=1500, help="the estimate's class")
    parser.add_argument("--nodes", type=int, default=20, help="the estimate's cluster")
    parser.add_argument("--cores-per-node", type=int, default=32, help="the estimate's nodes")
    parser.add_argument("--keep", action="store_true", help="keep the class and every output directory")
    parser.add_argument(
        "--rounds", type=int, default=1, help="run the modes in turn this many times, each into fresh directories"
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    if args.students < 1 or args.rounds < 1 or not modes or any(m not in MODES for m in modes):
        parser.error(f"--students and --rounds must be positive and --modes a list of {', '.join(MODES)}")

    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    work.chmod(0o755)
    started = time.monotonic()
    runs, jobs, env = [], [], dict(os.environ)
    by_mode: dict[str, list[Run]] = {}
    try:
        build(work / "class", args.students)
        with ExitStack() as stack:
            slurm_env: dict[str, str] | None = None
            for round_no in range(1, args.rounds + 1):
                for mode in modes:
                    label, options = MODES[mode]
                    if mode == "slurm":
                        why = unavailable()
                        if why:
                            print(f"bench-cluster: --cluster slurm skipped: {why}", file=sys.stderr)
                            continue
                        if slurm_env is None:
                            slurm_env = {**env, **stack.enter_context(running_slurm()).env}
                        env = slurm_env
                        options = [*options, "--cluster-config", str(slurm_config(work))]
                    name = mode if args.rounds == 1 else f"{mode}-{round_no}"
                    label = label if args.rounds == 1 else f"{label} (round {round_no})"
                    run = batch(work / "class", work / name, label, options, env, work / f"{name}.log")
                    runs.append(run)
                    by_mode.setdefault(mode, []).append(run)
                    if mode == "slurm" and round_no == 1:
                        jobs = slurm_jobs(env, work / "jobs")
        if not runs:
            raise SystemExit("bench-cluster: no mode ran")
        # The client's own part, serial: the first mode's directory again, every student cached (no cluster
        # needed), for the whole class and for its first student alone: F + N r and F + r.
        again = work / (modes[0] if args.rounds == 1 else f"{modes[0]}-1")
        rerun = batch(work / "class", again, "rerun, all cached", MODES["jobs"][1], env, work / "rerun.log")
        first = min(rerun.grades)
        (work / "one.csv").write_text(f"student,path\n{first},{work / 'class' / first}\n")
        alone = batch(work / "one.csv", again, "rerun, one student", MODES["jobs"][1], env, work / "rerun1.log")
        if alone.grades[first] != rerun.grades[first]:
            raise SystemExit(f"the one-student rerun graded {first} again: the client's cost is not measured")
        client = (rerun.wall - alone.wall) / (args.students - 1) if args.students > 1 else rerun.wall
        base = by_mode.get("jobs", runs)[0]
        kinds = Counter(p.name.split("-", 1)[1] for p in (work / "class").iterdir())
        print(f"\nClass: {args.students} students ({', '.join(f'{n} {kind}' for kind, n in kinds.most_common())}).\n")
        print("\n".join(table(runs, base, args.students)))
        print("".join(f"\n{line}" for line in warm_against_cold(by_mode)))
        print(f"\n{agreement(runs)}")
        print(
            f"Per student: {_size(work / 'class') / args.students / 1e3:.0f} kB of submission (read by the client, "
            f"then by the worker), {_size(again / 'students') / args.students / 1e3:.0f} kB of output (a grading's "
            "comes back through Dask as a tar; the client writes it and the reports)."
        )
        print(
            f"Client's own cost (the batch again, every student cached: cache keys, rescoring, reports): "
            f"{rerun.wall:.1f} s for {args.students} students, {alone.wall:.1f} s for one, so "
            f"F = {alone.wall - client:.1f} s fixed and r = {client:.3f} s per student."
        )
        per_job = None
        if jobs:
            lines, per_job = slurm_lines(jobs, args.students)
            print("\n" + "\n".join(lines))
        print("\n" + "\n".join(estimate(args, base, alone.wall - client, client, per_job)))
        kept = f"; kept {work}" if args.keep else ""
        print(f"\n(bench-cluster.py took {time.monotonic() - started:.0f} s{kept})")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
