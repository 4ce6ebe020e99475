#!/usr/bin/env bash
# Install the grader and what it needs into the current Python (or the project's .venv where that Python
# is a distribution's, externally managed: scripts/python-env.sh): CPU-only torch first (so no
# dependency resolution can pull a multi-GB CUDA build), then the package itself (editable).
#   TORCH_INDEX_URL  where CPU torch comes from; outside machines with a local wheel use
#                    https://download.pytorch.org/whl/cpu (docs/platforms.md says so)
#   EXTRAS           pip extras to install with the package, e.g. "dev"
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python-env.sh
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "$PYTHON" -m pip install -q "$TORCH_SPEC" --index-url "$TORCH_INDEX_URL"
    else
        "$PYTHON" -m pip install -q "$TORCH_SPEC"
    fi
fi
target="."
[ -n "${EXTRAS:-}" ] && target=".[${EXTRAS}]"
"$PYTHON" -m pip install -q -e "$target"
