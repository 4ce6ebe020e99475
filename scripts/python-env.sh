# Sourced (never run) by install.sh, grade-example.sh and test.sh: which Python they install into and
# run.  Inside a virtual environment, or with a Python pip installs into (pyenv's, CI's, python.org's),
# that Python, as before.  A distribution's Python marked externally managed (PEP 668: Debian 12, Ubuntu
# 23.04 and later) makes pip refuse every install: then the project's own .venv, made once, first on
# PATH for the script and all it starts.  Never `--break-system-packages`.
# The rule is the marker, not "any Python outside a venv": .ci/run installs into the machine's python3
# (not externally managed) and runs the suite and the container stage with that very interpreter.
PYTHON=${PYTHON:-python3}
if "$PYTHON" - <<'PY'; then
import os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
sys.exit(0 if not in_venv and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) else 1)
PY
    project_venv=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv
    if [ ! -x "$project_venv/bin/python" ]; then
        echo "$PYTHON is externally managed (PEP 668): creating the project's own virtual environment, $project_venv" >&2
        "$PYTHON" -m venv "$project_venv" || {
            echo "could not create it: on Debian and Ubuntu, install the venv module (apt-get install python3-venv)" >&2
            rm -rf "$project_venv"
            exit 1
        }
    fi
    echo "$PYTHON is externally managed (PEP 668): installing into and running from $project_venv" >&2
    PATH=$project_venv/bin:$PATH
    PYTHON=$project_venv/bin/python
    VIRTUAL_ENV=$project_venv
    export PATH VIRTUAL_ENV
    unset project_venv
fi
export PYTHON
