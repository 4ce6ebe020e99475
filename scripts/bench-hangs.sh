#!/usr/bin/env bash
# Measure what hanging submissions cost (docs/measurements.md, issue 16): three hanging submissions
# graded alone, then a class of 20 (a quarter of them hanging) graded with `grader batch --jobs 2`.
# Run it on an idle machine, after scripts/install.sh; it prints one line per measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d /tmp/bench-hangs.XXXXXX)
trap 'rm -rf "$work"' EXIT

seconds() {  # seconds COMMAND...: wall time of a command, its output discarded
    local start=$EPOCHREALTIME
    "$@" >/dev/null 2>&1 || true
    "$PYTHON" -c "print($EPOCHREALTIME - $start)"
}

"$PYTHON" tests/corpus/hostile/spin_every_collective/make.py "$work/spin_every_collective"
"$PYTHON" tests/corpus/hostile/allgather_sleeps/make.py "$work/allgather_sleeps"
cp -r tests/corpus/hostile/deadlock_allreduce "$work/deadlock_allreduce"

for name in spin_every_collective allgather_sleeps deadlock_allreduce; do
    printf 'alone  %-24s %6.1f s\n' "$name" "$(seconds "$PYTHON" -m grader grade "$work/$name" --out "$work/out-$name")"
done

# The class: 5 hanging submissions (a quarter) and 15 that do not hang.
class=$work/class
mkdir -p "$class"
for name in spin_every_collective allgather_sleeps deadlock_allreduce; do cp -r "$work/$name" "$class/$name"; done
cp -r tests/corpus/hostile/import_never_finishes "$class/"
cp -r tests/corpus/hostile/escape_time_bound "$class/"
for name in read_reference kill_parents forged_results monkeypatch_comparisons oracle_expected_values proc_snooping \
    shipped_config syntax_error os_exit_in_collective sys_exit_in_collective; do
    cp -r "tests/corpus/hostile/$name" "$class/$name"
done
for i in 1 2 3; do cp -r reference/a9 "$class/ring$i"; done
for i in 1 2; do cp -r reference/a9-naive "$class/star$i"; done
printf 'class  %-24s %6.1f s\n' "20 students, --jobs 2" \
    "$(seconds "$PYTHON" -m grader batch "$class" --out "$work/class-out" --jobs 2)"
"$PYTHON" - "$work/class-out" <<'PY'
import csv, sys
from pathlib import Path
rows = list(csv.DictReader((Path(sys.argv[1]) / "gradebook.csv").open()))
print(f"       {len(rows)} rows in gradebook.csv, statuses: {sorted({r['status'] for r in rows})}")
PY
