#!/usr/bin/env bash
# README command 2: install everything the tests need, then lint, type-check and run the suite.
#   PYTEST_ARGS     extra pytest arguments, e.g. '-m "not slow"' for the quick loop
#   PYTEST_WORKERS  test processes at once (default 2; 0: all in pytest's own process)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh  # the project's .venv where python3 is externally managed (PEP 668)
EXTRAS=dev,cluster,similarity bash scripts/install.sh  # cluster: Dask and dask-jobqueue for grader batch --cluster; similarity: copydetect
bash scripts/install-chromium.sh
bash scripts/install-actionlint.sh
bash scripts/install-slurm.sh  # a real single-node Slurm for tests/test_batch_slurm.py
ruff check .
ruff format --check .
mypy
lint-imports  # the engine never imports an assignment pack (pyproject.toml, [tool.importlinter])
# shellcheck disable=SC2086
# Two workers (pytest-xdist): most of a grading waits (a case's budget, a rank's start), so a second
# stream of tests fills the other core; modules that share a grading or read the whole process table
# share a worker (tests/conftest.py, SHARED_WORKER).  PYTEST_WORKERS=0 runs them in this process.
exec python3 -m pytest -q --durations=30 -n "${PYTEST_WORKERS:-2}" --dist loadgroup ${PYTEST_ARGS:-}  # the 30 slowest: where CI time goes
