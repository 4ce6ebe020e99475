"""Grade what a student grades, on this machine, and compare with the scores the Linux grade of record gives.

Run by `.github/workflows/student-platforms.yml` on ubuntu-latest, macos-latest and windows-latest, after
`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu` and `pip install .` (no
extras: only the declared dependencies).  Each submission is graded by the installed grader exactly as a
student runs it, every pack's in the form its handout asks for; the exit status is 1 when any score
differs.  A table of scores, runtimes and times goes to the job summary.  `tests/test_declared_dependencies.py`
grades each pack's reference through `grade` below, in a fresh venv of the package alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: (tree, pack, the score the Linux grade of record gives): the same totals the test suite asserts
EXPECTED = [
    ("reference/a9", "a9", 105.0),
    ("reference/a9-naive", "a9", 100.0),
    ("student_template/a9", "a9", 0.0),
    ("reference/a4", "a4", 100.0),
    ("reference/hw12", "hw12", 6.5),  # the notebook under the handout's name, hw12.ipynb
    ("reference/a5", "a5", 88.0),  # report.md: Q1's 10 points and Q7's explanation's 2 wait for an instructor
]


@dataclass(frozen=True)
class Grade:
    """One tree graded by `python -m grader grade`: its score, or None when the grader failed."""

    tree: str
    want: float
    score: float | None
    runtime: str
    seconds: float
    stderr: str  # the grader's own, for a failure's report
    out: Path  # where its outputs are


def submission(tree: str, pack: str, work: Path) -> Path:
    """A4 as its hand-in, a zip with the folder inside; every other pack's tree as it is."""
    if pack != "a4":
        return REPO / tree
    folder = REPO / tree
    return Path(shutil.make_archive(str(work / "a4-handin"), "zip", folder.parent, folder.name))


def grade(
    python: str,
    tree: str,
    pack: str,
    want: float,
    out: Path,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Grade:
    """Grade `tree` with the grader installed for `python`: `-I`, so neither the working directory
    (a checkout's own `grader/`) nor PYTHON* variables can stand in for what was installed.  `env`
    replaces this process's environment; past `timeout` seconds the grading is a failure that says so."""
    out.mkdir(parents=True, exist_ok=True)
    dest = out / tree.replace("/", "_")
    t0 = time.monotonic()
    cmd = [python, "-I", "-m", "grader", "grade", str(submission(tree, pack, out)), "--pack", pack]
    cmd += ["--out", str(dest), "--format", "json"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Grade(tree, want, None, "", time.monotonic() - t0, f"no result after {timeout:g} s", dest)
    seconds = time.monotonic() - t0
    if done.returncode != 0 or not (dest / "results.json").exists():
        return Grade(tree, want, None, "", seconds, f"exit {done.returncode}\n{done.stderr[-3000:]}", dest)
    result = json.loads((dest / "results.json").read_text(encoding="utf-8"))
    return Grade(tree, want, result["score"], result["isolation"].get("runtime", ""), seconds, done.stderr, dest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], False
    for tree, pack, want in EXPECTED:
        g = grade(sys.executable, tree, pack, want, out)
        if g.score is None:
            print(f"{tree}: the grader failed ({g.stderr})")
            failed = True
            rows.append(f"| {tree} | {want:g} | error | | {g.seconds:.0f} s |")
            continue
        ok = g.score == want
        failed |= not ok
        print(f"{tree}: {g.score:g} (Linux: {want:g}) {'ok' if ok else 'DIFFERS'} in {g.seconds:.0f} s; {g.runtime}")
        rows.append(f"| {tree} | {want:g} | {g.score:g} | {g.runtime} | {g.seconds:.0f} s |")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        head = ["| submission | Linux | here | runtime | time |", "|---|---:|---:|---|---:|"]
        with open(summary, "a", encoding="utf-8") as f:
            f.write("\n".join([f"## Student platform: {sys.platform}", "", *head, *rows, ""]) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
