#!/usr/bin/env bash
# README command 1: install, then grade the bundled full-marks example with the default rubric.
# Outputs (results.json, junit.xml, gradescope.json, classroom.json, summary.md) land in out/example/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh  # the project's .venv where python3 is externally managed (PEP 668)
bash scripts/install.sh
exec grader grade reference/a9 --out out/example "$@"
