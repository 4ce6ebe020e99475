#!/usr/bin/env bash
# HW12's full grade against A4's, side by side in one run (docs/measurements.md): ROUNDS rounds of
# `grader grade reference/a4`, then reference/hw12 under BEFORE (another checkout's `grader`, if set:
# its own venv, since the zygote runs `python -I`), then reference/hw12 under this checkout's `grader`.
# Prints each wall time, the sums and the ratios to A4; each HW12 grading must still score 6.5.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-4}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
wall() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
score() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['score'])" "$1/results.json"; }
a4=0 before=0 after=0
for i in $(seq "$rounds"); do
  t=$(wall grader grade reference/a4 --pack a4 --out "$out/a4"); a4=$(echo "$a4 + $t" | bc)
  line="round $i: a4 $t s"
  if [ -n "${BEFORE:-}" ]; then
    t=$(wall "$BEFORE" grade reference/hw12 --pack hw12 --out "$out/before"); before=$(echo "$before + $t" | bc)
    line+=", hw12 before $t s (score $(score "$out/before"))"
  fi
  t=$(wall grader grade reference/hw12 --pack hw12 --out "$out/after"); after=$(echo "$after + $t" | bc)
  echo "$line, hw12 $t s (score $(score "$out/after")), $(uptime | sed 's/.*load/load/')"
done
echo "sums: a4 $a4 s, hw12 $after s ($(echo "scale=2; $after / $a4" | bc)x a4)"
[ -n "${BEFORE:-}" ] && echo "hw12 before: $before s ($(echo "scale=2; $before / $a4" | bc)x a4)"
exit 0
