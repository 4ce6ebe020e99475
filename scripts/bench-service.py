"""A deadline rush on the grading service (issue 59, item 8; docs/measurements.md).

    python scripts/bench-service.py                          # 12 students over 120 s, a third push twice
    python scripts/bench-service.py --students 6 --window 60 # a quick run
    python scripts/bench-service.py --window 0               # everyone at once: the service's capacity

A class of K A9 students, each a git repository, pushes to a local ``grader serve`` (SQLite in a temporary
state_dir, ``--workers`` warm workers, a local OIDC issuer: ``tests/oidc_issuer.py``) at seeded random times
over ``--window`` seconds; a fraction (``--twice``) pushes a first commit (the untouched template) and, a
little later, their final one, so the first may be superseded while it waits.  Each push is what the
Classroom workflow's ``grader submit`` sends: HEAD as a bundle (``grader.submit.bundle_head``) and a token
with GitHub's claims naming the repository and commit.

Printed: the latency from the POST's receipt to the grade, by the service's own clocks (``received_at`` to
``graded_at``: p50, p95, max, over the pushes graded), the number superseded, and throughput: the service's
gradings per minute from the first receipt to the last grade, against ``grader batch --jobs W`` over the
same class's final commits (one grading per student), with the same secret.  Every student's service score
is checked against the batch's: a difference is printed (exit 1).

The class cycles reference/a9, reference/a9-naive, student_template/a9 and a syntax error, so a small class
is mixed; nothing in it hangs (a hang waits out its budgets and says nothing about the service).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from grader import submit

if TYPE_CHECKING:
    from oidc_issuer import Issuer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the service's test helpers (tests/ is not a package)
from service_kit import git  # noqa: E402

PREFIX, ASSIGNMENT = "a9-", "a9"
AUDIENCE = "https://grader.bench"
TREES = {
    "reference": REPO / "reference" / "a9",
    "naive": REPO / "reference" / "a9-naive",
    "template": REPO / "student_template" / "a9",
    "syntax-error": REPO / "tests" / "corpus" / "hostile" / "syntax_error",
}
PATTERN = ("reference", "naive", "template", "reference", "syntax-error", "naive")
FIRST_PUSH = "template"  # what a student who pushes twice pushes first: the untouched template


@dataclass
class Push:
    """One push of the rush: who, when (seconds after the start), which commit, and what the service said."""

    student: str
    at: float
    kind: str
    final: bool
    bundle: bytes = b""
    sha: str = ""
    id: str = ""
    status: str = ""
    received_at: float | None = None
    graded_at: float | None = None
    score: float | None = None
    refused: str = ""
    answer: dict[str, object] = field(default_factory=dict)


# --- the arithmetic (tests/test_bench_service.py) ---------------------------------------------------------


def schedule(students: int, window: float, twice: float, seed: int) -> list[Push]:
    """Every push, by time: student i's final commit is ``PATTERN``'s kind in turn, at a seeded random time
    in ``[0, window]``; the first ``round(twice * students)`` of a seeded shuffle push the template first,
    at a random time before their final push."""
    rng = random.Random(seed)
    names = [f"s{i:03d}" for i in range(students)]
    doubles = set(rng.sample(names, round(twice * students)))
    pushes = []
    for i, name in enumerate(names):
        at = rng.uniform(0, window)
        pushes.append(Push(name, at, PATTERN[i % len(PATTERN)], final=True))
        if name in doubles:
            pushes.append(Push(name, rng.uniform(0, at), FIRST_PUSH, final=False))
    return sorted(pushes, key=lambda p: (p.at, p.student, p.final))


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100): the smallest value with at least q% of them at or below."""
    if not values:
        raise ValueError("no values")
    ranked = sorted(values)
    return ranked[max(1, math.ceil(q / 100 * len(ranked))) - 1]


def summary(pushes: list[Push], batch_wall: float | None) -> dict[str, float | int | None]:
    """The figures printed: latency receipt -> grade over the graded pushes, the count superseded, and
    gradings per minute for the service (first receipt to last grade) and for the batch."""
    graded = [p for p in pushes if p.status == "graded"]
    latencies = [p.graded_at - p.received_at for p in graded if p.graded_at is not None and p.received_at is not None]
    received = [p.received_at for p in pushes if p.received_at is not None]
    finished = [p.graded_at for p in graded if p.graded_at is not None]
    span = max(finished) - min(received) if finished and received else None
    finals = sum(1 for p in pushes if p.final)
    return {
        "pushes": len(pushes),
        "graded": len(graded),
        "superseded": sum(1 for p in pushes if p.status == "superseded"),
        "refused": sum(1 for p in pushes if p.refused),
        "p50": percentile(latencies, 50) if latencies else None,
        "p95": percentile(latencies, 95) if latencies else None,
        "max": max(latencies) if latencies else None,
        "service_span": span,
        "service_per_min": 60 * len(graded) / span if span else None,
        "batch_wall": batch_wall,
        "batch_per_min": 60 * finals / batch_wall if batch_wall else None,
    }


# --- the class and the service ----------------------------------------------------------------------------


def build(pushes: list[Push], root: Path) -> Path:
    """Each student's repository, committed push by push; each push's bundle and sha taken as it is made.
    Returns the roster directory of final trees for ``grader batch``."""
    roster = root / "class"
    for push in sorted(pushes, key=lambda p: p.final):  # every first push is committed before any final one
        repo = roster / push.student
        if not repo.exists():
            repo.mkdir(parents=True)
            git(repo, "init", "-q", "-b", "main")
        for entry in repo.iterdir():
            if entry.name != ".git":
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        shutil.copytree(TREES[push.kind], repo, dirs_exist_ok=True, ignore=shutil.ignore_patterns("expected.json"))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "--allow-empty", "-m", f"{push.student}: {push.kind}")  # a commit of their own
        push.bundle, push.sha = submit.bundle_head(repo)
    return roster


def epoch(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() if iso else None


def rush(pushes: list[Push], url: str, issuer: Issuer) -> None:
    """Send every push at its time (a thread each), then wait until every one is final."""
    start = time.monotonic()

    def send(push: Push) -> None:
        time.sleep(max(0.0, push.at - (time.monotonic() - start)))
        token = issuer.token(f"{issuer.owner}/{PREFIX}{push.student}", push.sha)
        try:
            push.id = submit.post_bundle(url, ASSIGNMENT, push.bundle, token).id
        except submit.NotGraded as exc:
            push.refused = exc.reason

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(pushes)) as pool:
        list(pool.map(send, pushes))
    waiting = [p for p in pushes if p.id]
    while waiting:
        for push in list(waiting):
            with urllib.request.urlopen(f"{url}/api/v1/submissions/{push.id}", timeout=30) as answer:
                doc = json.loads(answer.read())
            if doc["status"] in submit.FINAL:
                push.status, push.answer = doc["status"], doc
                push.received_at, push.graded_at = epoch(doc["received_at"]), epoch(doc["graded_at"])
                push.score = doc["results"]["score"] if doc.get("results") else None
                waiting.remove(push)
        time.sleep(0.5)


def batch(roster: Path, out: Path, jobs: int, secret: Path) -> float:
    cmd = [sys.executable, "-m", "grader", "batch", str(roster), "--out", str(out), "--jobs", str(jobs)]
    cmd += ["--pack", "a9", "--secret-file", str(secret), "--seal-key", str(out.parent / "batch-seal.key")]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"grader batch failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def batch_scores(out: Path) -> dict[str, float]:
    scores = {}
    for results in (out / "students").glob("*/results.json"):
        scores[results.parent.name] = float(json.loads(results.read_text())["score"])
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=12)
    parser.add_argument("--window", type=float, default=120.0, help="seconds over which the class pushes")
    parser.add_argument("--twice", type=float, default=1 / 3, help="the fraction that pushes twice")
    parser.add_argument("--workers", type=int, default=2, help="the service's workers, and the batch's --jobs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-batch", action="store_true", help="skip the batch over the same class")
    args = parser.parse_args()
    pushes = schedule(args.students, args.window, args.twice, args.seed)
    from local_service import OWNER, local_service
    from oidc_issuer import Issuer

    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        root = Path(tmp)
        roster = build(pushes, root)
        issuer = Issuer(root, audience=AUDIENCE, owner=OWNER)
        assignments = [{"id": ASSIGNMENT, "pack": "a9", "repo_prefix": PREFIX}]
        extra = {"limits": {"per_minute": 60}}
        with local_service(root, issuer, assignments, workers=args.workers, **extra) as service:
            print(
                f"{args.students} students, {len(pushes)} pushes over {args.window:g} s, {args.workers} workers, "
                f"load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            rush(pushes, service.url, issuer)
        batch_wall = None
        mismatches = []
        if not args.no_batch:
            out = root / "batch-out"
            batch_wall = batch(roster, out, args.workers, service.state / "secret")
            expected = batch_scores(out)
            for push in pushes:
                if push.final and push.status == "graded" and expected.get(push.student) != push.score:
                    mismatches.append(f"{push.student}: service {push.score}, batch {expected.get(push.student)}")
        report(summary(pushes, batch_wall))
        print(f"load average after: {os.getloadavg()[0]:.1f} (this machine's other work moves every figure above)")
        for line in mismatches:
            print(f"  SCORE DIFFERS: {line}")
        errors = [
            f"{p.student}: {p.refused or p.answer.get('error')}" for p in pushes if p.refused or p.status == "error"
        ]
        for line in errors:
            print(f"  NOT GRADED: {line}")
        if mismatches or errors:
            raise SystemExit(1)


def report(figures: dict[str, float | int | None]) -> None:
    def s(value: float | int | None, unit: str = " s") -> str:
        return "-" if value is None else f"{value:.1f}{unit}"

    print(
        f"pushes {figures['pushes']}: graded {figures['graded']}, superseded {figures['superseded']}, "
        f"refused {figures['refused']}"
    )
    print(f"latency receipt -> grade: p50 {s(figures['p50'])}, p95 {s(figures['p95'])}, max {s(figures['max'])}")
    print(
        f"service: {figures['graded']} gradings in {s(figures['service_span'])} (first receipt to last grade), "
        f"{s(figures['service_per_min'], '/min')}"
    )
    print(f"grader batch over the final commits: {s(figures['batch_wall'])}, {s(figures['batch_per_min'], '/min')}")


if __name__ == "__main__":
    main()
