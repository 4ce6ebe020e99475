#!/usr/bin/env bash
# README's service command: after the two set-up commands, the grading service on SQLite in
# service-state/ (docs/instructors/service.yaml: course tokens, A9 and A5), with the service's extra
# installed first where it is missing.  Stop it with Ctrl-C.
#   bash scripts/serve-example.sh [CONFIG]     CONFIG: another service.yaml (default: the manual's example)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh  # the project's .venv where python3 is externally managed (PEP 668)
if ! "$PYTHON" -c "import grader.service.app" 2>/dev/null; then  # the extra (pyproject: service) is missing
    EXTRAS=service bash scripts/install.sh
fi
exec grader serve --config "${1:-docs/instructors/service.yaml}"
