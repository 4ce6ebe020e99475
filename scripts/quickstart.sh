#!/usr/bin/env bash
# The manual's quick starts include their commands from this file (docs/students/index.md,
# docs/instructors/index.md), and tests/test_quickstart.py runs it on the bundled reference, so a quick
# start that stops working fails the suite.
#   bash scripts/quickstart.sh student DIR       DIR: a student's repository (A9's layout)
#   bash scripts/quickstart.sh instructor DIR    DIR holds roster/ (a folder per student), rubric.yaml, manual.csv
set -euo pipefail

student() {
    cd "$1"
    # [student]
    grader check .                            # the static policy check alone: forbidden collectives, with file:line
    grader grade . --out out                  # every case; results.json, summary.md, report.html, ... in out/
    grader grade . -k "allreduce and ws4"     # only the matching cases (pytest's -k grammar): a partial score, said so
    grader repro "test_allreduce[ws3-float64-7]"   # writes repro_test_allreduce_ws3_float64_7.py
    python repro_test_allreduce_ws3_float64_7.py   # that case alone in your own Python: break in your code
    # [/student]
}

instructor() {
    cd "$1"
    # [instructor]
    grader batch roster/ --out out/class --jobs 2   # gradebook.csv, a report.html per student, the class's index.html
    # then, after editing rubric.yaml's points, adding manual scores or a deadline: every student rescored,
    # nobody regraded (each grading is cached under the submission's digest and the rubric's matrix part)
    grader batch roster/ --out out/class --rubric rubric.yaml --manual manual.csv --deadline 2026-12-01T23:59
    # [/instructor]
}

"$@"
