#!/usr/bin/env bash
# README command 2: install everything the tests need, then lint, type-check and run the suite.
#   PYTEST_ARGS     extra pytest arguments, e.g. '-m "not slow"' for the quick loop
#   PYTEST_WORKERS  test processes at once (default 2; 0: all in pytest's own process)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh  # the project's .venv where python3 is externally managed (PEP 668)
EXTRAS=dev,cluster,similarity,docs,service bash scripts/install.sh  # cluster: Dask and dask-jobqueue for grader batch --cluster; similarity: copydetect; docs: Sphinx for the manual; service: grader serve
bash scripts/install-chromium.sh
bash scripts/install-actionlint.sh
bash scripts/install-slurm.sh  # a real single-node Slurm for tests/test_batch_slurm.py
bash scripts/install-postgres.sh  # a real PostgreSQL for the service's database tests (tests/postgres.py)
ruff check .
ruff format --check .
# mypy on a fresh clone (no cache) takes about a minute of one core: it runs beside pytest, which keeps
# both busy, rather than in front of it with the other core idle; its verdict is read once pytest ends.
types=$(mktemp)
mypy >"$types" 2>&1 &
mypy_pid=$!
lint-imports  # the engine never imports an assignment pack (pyproject.toml, [tool.importlinter])
# Two workers (pytest-xdist): most of a grading waits (a case's budget, a rank's start), so a second
# stream of tests fills the other core; modules that share a grading or read the whole process table
# share a worker (tests/conftest.py, SHARED_WORKER).  PYTEST_WORKERS=0 runs them in this process.
status=0
# The neighbour test loads the machine on purpose (an attacker's setsid spinners and memory beside honest
# gradings, issue 58): it runs first and by itself, so that it is no other test's neighbour (a rootless
# grading, which has no CPU group of its own, moved a verdict beside it).  Exit 5: deselected by PYTEST_ARGS.
# shellcheck disable=SC2086
python3 -m pytest -q -n 0 tests/test_neighbours.py ${PYTEST_ARGS:-} || { rc=$?; [[ $rc -eq 5 ]] || status=$rc; }
# shellcheck disable=SC2086
python3 -m pytest -q --durations=30 -n "${PYTEST_WORKERS:-2}" --dist loadgroup --ignore=tests/test_neighbours.py \
    ${PYTEST_ARGS:-} || status=$?  # the 30 slowest: where CI time goes
if ! wait "$mypy_pid"; then
    [[ $status -ne 0 ]] || status=1
fi
cat "$types"
rm -f "$types"
exit "$status"
