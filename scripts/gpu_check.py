"""The gradings of `scripts/gpu-check.sh` (issue 38), run with the venv it made: every pack's reference,
graded ROUNDS times with the machine's GPU visible and ROUNDS times with it hidden from the whole command
(`CUDA_VISIBLE_DEVICES=`), the two interleaved so that a drift in the machine's load meets both alike.

It fails unless every grading scores its exact score with every layer on (the `full` runtime, as root)
and each grading with the GPU visible takes at most RATIO times the mean of the same pack's gradings with
it hidden.  A Markdown table of the times goes to stdout, for docs/measurements.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import student_platforms  # beside this script: its directory is first on sys.path


def layers_off(out: Path) -> dict[str, str]:
    layers = json.loads((out / "results.json").read_text(encoding="utf-8"))["isolation"]
    return {k: v for k, v in layers.items() if str(v).partition(":")[0] != "on"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", required=True, help="the venv's interpreter: the grader installed from wheels")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ratio", type=float, default=1.5)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a grading may take: a hang fails")
    parser.add_argument("--packs", default="a9,a4,hw12,a5")
    args = parser.parse_args()
    packs = args.packs.split(",")
    references = [(t, p, w) for t, p, w in student_platforms.EXPECTED if t == f"reference/{p}" and p in packs]
    visible = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environments = {"GPU visible": visible, "GPU hidden": {**visible, "CUDA_VISIBLE_DEVICES": ""}}
    failures, rows = [], []
    for tree, pack, want in references:
        seconds: dict[str, list[float]] = {label: [] for label in environments}
        for round_ in range(args.rounds):
            for label, env in environments.items():
                out = args.out / f"{pack}-{round_}-{label.split()[1]}"
                g = student_platforms.grade(args.python, tree, pack, want, out, env=env, timeout=args.timeout)
                seconds[label].append(g.seconds)
                print(f"{pack} {label} round {round_ + 1}: {g.score} (want {want:g}) in {g.seconds:.1f} s", flush=True)
                if g.score != want:
                    failures.append(f"{pack}, {label}: scored {g.score}, not {want:g}: {g.stderr}")
                elif not g.runtime.startswith("on: full") or (off := layers_off(g.out)):
                    failures.append(f"{pack}, {label}: not every layer on: runtime {g.runtime!r}, off {off}")
        base = statistics.mean(seconds["GPU hidden"])
        failures += [
            f"{pack}: {s:.1f} s with the GPU visible, over {args.ratio:g} x {base:.1f} s with it hidden"
            for s in seconds["GPU visible"]
            if s > args.ratio * base
        ]
        shown = {label: " / ".join(f"{s:.1f}" for s in times) for label, times in seconds.items()}
        rows.append(f"| {pack} | {want:g} | {shown['GPU visible']} | {shown['GPU hidden']} |")
    print("\n| pack | score | s, GPU visible | s, GPU hidden (`CUDA_VISIBLE_DEVICES=`) |\n|---|---:|---:|---:|")
    print("\n".join(rows))
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
