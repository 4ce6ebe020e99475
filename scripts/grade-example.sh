#!/usr/bin/env bash
# README command 1: install, then grade the bundled full-marks example with the default rubric.
# Outputs (results.json, junit.xml, gradescope.json, classroom.json, summary.md) land in out/example/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec grader grade reference/a9 --out out/example "$@"
