#!/usr/bin/env python3
"""The same verdicts on a loaded machine: every fidelity entry, template and reference graded several
times beside processes that spin on every core, and every case's verdict compared across the gradings.

A verdict that moves between two gradings of one tree breaks the grader's determinism (same submission
and secret, same score), and on a CI machine busier than this one it fails the suite (an HW12 template
case did, as a ``hang`` and then as a ``wrong``/``crash`` split: docs/measurements.md).  The rounds
alternate over the trees, so a drift of the machine's speed spreads over all of them.

    python3 scripts/bench-determinism.py                      # every tree, 3 rounds, a spinner per core
    python3 scripts/bench-determinism.py --rounds 5 hw12_template student_template/hw12
    python3 scripts/bench-determinism.py --spinners 0         # idle, for comparison

Exit status 1 when any tree's verdicts or score moved; each such tree is printed with the cases that moved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fidelity import ENTRIES, build, pack_of, spec  # noqa: E402 - the checkout's own corpus

Grading = tuple[dict[str, str], str]  # case -> verdict, and the score (or why there is none)


def trees(work: Path) -> dict[str, tuple[Path, str]]:
    """Name -> (submission tree, pack): each fidelity entry built from its base, then the bundled trees."""
    found = {
        name: (build(REPO / "tests" / "corpus" / "fidelity" / name, spec(name), work / name), pack_of(name))
        for name in ENTRIES
    }
    for kind in ("student_template", "reference"):
        for tree in sorted((REPO / kind).iterdir()):
            found[f"{kind}/{tree.name}"] = (tree, "a9" if tree.name.startswith("a9") else tree.name)
    return found


def grade(tree: Path, pack: str, secret: Path, out: Path) -> Grading:
    rubric = REPO / "rubrics" / f"{pack}.yaml"
    args = ["grade", str(tree), "--rubric", str(rubric), "--secret-file", str(secret), "--out", str(out)]
    done = subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True)
    try:
        result = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return {}, f"no results.json (exit status {done.returncode}): {done.stderr[-300:]}"
    return {c["id"]: c["verdict"] for c in result["cases"]}, str(result["score"])


def moved(gradings: list[Grading]) -> list[str]:
    """The cases whose verdict is not the same in every grading."""
    cases = sorted(set().union(*(verdicts for verdicts, _ in gradings)))
    return [c for c in cases if len({verdicts.get(c) for verdicts, _ in gradings}) > 1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "names", nargs="*", help="trees to grade (an entry's name, student_template/a9, ...); default all"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spinners", type=int, default=os.cpu_count() or 2, help="busy processes beside the gradings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-determinism-") as tmp:
        work = Path(tmp)
        secret = work / "secret"
        secret.write_text("bench-determinism\n")
        (work / "trees").mkdir()
        chosen = {n: t for n, t in trees(work / "trees").items() if not args.names or n in args.names}
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.spinners)]
        seen: dict[str, list[Grading]] = {name: [] for name in chosen}
        began = time.monotonic()
        try:
            for r in range(args.rounds):
                for name, (tree, pack) in chosen.items():
                    seen[name].append(grade(tree, pack, secret, work / "out" / str(r) / name))
                    print(f"round {r + 1} {name}: {seen[name][-1][1]}", flush=True)
        finally:
            for spinner in spinners:
                spinner.kill()
        unstable = 0
        for name, gradings in seen.items():
            cases, scores = moved(gradings), {score for _, score in gradings}
            if cases or len(scores) > 1:
                unstable += 1
                print(f"MOVED {name}: scores {sorted(scores)}, {len(cases)} case(s)")
                for case in cases[:10]:
                    print(f"    {case}: {[verdicts.get(case) for verdicts, _ in gradings]}")
        minutes = (time.monotonic() - began) / 60
        print(
            f"{len(seen)} trees x {args.rounds} gradings beside {args.spinners} spinners in {minutes:.0f} min: "
            f"{unstable} with a verdict or score that moved"
        )
        return 1 if unstable else 0


if __name__ == "__main__":
    raise SystemExit(main())
