"""A student's re-grade under ``grader grade --watch`` against a cold ``grader grade`` of the same tree,
in one run (docs/measurements.md; issue 41 asks the re-grade to take at most half the cold wall time).

    python scripts/bench-watch.py                              # reference/a9, 3 rounds of each
    python scripts/bench-watch.py --tree student_template/a9 --rounds 5
    python scripts/bench-watch.py --isolation portable         # as on macOS and Windows (forked on Linux)

Cold: the wall time of ``python -m grader grade TREE --out DIR``, a process of its own, as a student
types it.  Re-grade: from a save of a graded file (a comment appended to ``src/collectives.py``, which
changes no result) until the watch loop has printed the re-grade's ``Since the last grade`` line.  That
includes the loop's wait for the save to hold still (one poll, ``watch.POLL_S``, and up to one more to see it), as
a student sees it.  Both grade a copy of the tree; every grading must give the same score.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
SCORE = re.compile(r"^Score: (\S+)/")
EDITED = "src/collectives.py"


Run = tuple[float, str]  # a grading's wall seconds and score


def cold(tree: Path, out: Path, isolation: str) -> Run:
    """One ``grader grade``: its wall time and score."""
    began = time.monotonic()
    cmd = [sys.executable, "-m", "grader", "grade", str(tree), "--out", str(out), "--isolation", isolation]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"bench-watch: grader grade exited {done.returncode}\n{done.stderr[-2000:]}")
    return wall, _score(done.stdout.splitlines())


def _score(lines: list[str]) -> str:
    scores = [m.group(1) for line in lines if (m := SCORE.match(line))]
    if not scores:
        raise SystemExit("bench-watch: a grading printed no score")
    return scores[-1]


def _until(stream: IO[str], marker: str) -> list[str]:
    """The watch loop's lines up to and including the first that starts with ``marker``."""
    lines = []
    for line in stream:
        lines.append(line.rstrip("\n"))
        if line.startswith(marker):
            return lines
    raise SystemExit("bench-watch: the watch loop ended:\n" + "\n".join(lines[-40:]))


def alternated(tree: Path, work: Path, rounds: int, isolation: str) -> tuple[list[Run], list[Run]]:
    """``rounds`` cold gradings and ``rounds`` re-grades under ``--watch``, one of each in turn: this
    machine's speed drifts by 20% within minutes, and a cold run then a warm one seconds apart cancels
    most of it, where all the cold runs before all the warm ones do not.  A re-grade is timed from the
    save to its summary; the watch loop waits idle, its spare host ready, while the cold grading runs."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "grader", "grade", str(tree), "--out", str(work / "watch"), "--isolation", isolation]
    loop = subprocess.Popen([*cmd, "--watch"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert loop.stdout is not None
    colds, warm = [], []
    try:
        _until(loop.stdout, "Score:")  # the first grade: the loop's own start, not a re-grade
        for i in range(rounds):
            colds.append(cold(tree, work / f"cold{i}", isolation))
            time.sleep(2.0)  # a student reading the result: the spare host gets ready meanwhile, as it would
            with (tree / EDITED).open("a") as f:
                f.write(f"\n# edit {i}\n")
            began = time.monotonic()
            lines = _until(loop.stdout, "Since the last grade")
            warm.append((time.monotonic() - began, _score(lines)))
    finally:
        loop.send_signal(signal.SIGINT)
        try:
            loop.wait(timeout=60)
        except subprocess.TimeoutExpired:
            loop.kill()
            loop.wait()
    return colds, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", default="reference/a9", help="the tree to grade, from the checkout's root")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--isolation", default="auto", choices=["auto", "full", "portable"], help="for every grading")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        work = Path(tmp)
        tree = Path(shutil.copytree(REPO / args.tree, work / "tree", ignore=shutil.ignore_patterns("__pycache__")))
        colds, warm = alternated(tree, work, args.rounds, args.isolation)
    scores = {score for _, score in colds + warm}
    if len(scores) != 1:
        raise SystemExit(f"bench-watch: the gradings disagree: {sorted(scores)}")
    cold_s, warm_s = statistics.median(t for t, _ in colds), statistics.median(t for t, _ in warm)
    print(f"`{args.tree}`, --isolation {args.isolation}, score {scores.pop()} every time, {args.rounds} of each:")
    print("| grading | each, s | median s |")
    print("|---|---|---|")
    print(f"| `grader grade` (cold) | {', '.join(f'{t:.1f}' for t, _ in colds)} | {cold_s:.1f} |")
    print(f"| re-grade under `--watch` | {', '.join(f'{t:.1f}' for t, _ in warm)} | {warm_s:.1f} |")
    pairs = [w / c for (w, _), (c, _) in zip(warm, colds, strict=True)]
    print(f"re-grade / cold: {warm_s / cold_s:.2f} of the medians; each pair {', '.join(f'{p:.2f}' for p in pairs)}")
    print("(issue 41 asks at most 0.50)")


if __name__ == "__main__":
    main()
