"""Grade what a student grades, on this machine, and compare with the scores the Linux grade of record gives.

Run by `.github/workflows/student-platforms.yml` on ubuntu-latest, macos-latest and windows-latest, after
`pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu` and `pip install .`.  Each
submission is graded by the installed `grader` command exactly as a student runs it; the exit status is 1
when any score differs.  A table of scores, runtimes and times goes to the job summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: (tree, pack, the score the Linux grade of record gives): the same totals the test suite asserts
EXPECTED = [
    ("reference/a9", "a9", 105.0),
    ("reference/a9-naive", "a9", 100.0),
    ("student_template/a9", "a9", 0.0),
    ("reference/a4", "a4", 100.0),
]


def submission(tree: str, pack: str, work: Path) -> Path:
    """A9 trees as they are; A4 as its hand-in, a zip with the folder inside."""
    if pack != "a4":
        return REPO / tree
    folder = REPO / tree
    return Path(shutil.make_archive(str(work / "a4-handin"), "zip", folder.parent, folder.name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], False
    for tree, pack, want in EXPECTED:
        dest = out / tree.replace("/", "_")
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "grader", "grade", str(submission(tree, pack, out)), "--pack", pack]
        done = subprocess.run([*cmd, "--out", str(dest), "--format", "json"], capture_output=True, text=True)
        seconds = time.monotonic() - t0
        if done.returncode != 0 or not (dest / "results.json").exists():
            print(f"{tree}: the grader failed (exit {done.returncode})\n{done.stderr[-3000:]}")
            failed = True
            rows.append(f"| {tree} | {want:g} | error | | {seconds:.0f} s |")
            continue
        result = json.loads((dest / "results.json").read_text(encoding="utf-8"))
        runtime = result["isolation"].get("runtime", "")
        ok = result["score"] == want
        failed |= not ok
        print(
            f"{tree}: {result['score']:g} (Linux: {want:g}) {'ok' if ok else 'DIFFERS'} in {seconds:.0f} s; {runtime}"
        )
        rows.append(f"| {tree} | {want:g} | {result['score']:g} | {runtime} | {seconds:.0f} s |")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        head = ["| submission | Linux | here | runtime | time |", "|---|---:|---:|---|---:|"]
        with open(summary, "a", encoding="utf-8") as f:
            f.write("\n".join([f"## Student platform: {sys.platform}", "", *head, *rows, ""]) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
