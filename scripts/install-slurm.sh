#!/usr/bin/env bash
# Install Debian's Slurm and munge for tests/test_batch_slurm.py (its fixture starts a single-node
# Slurm from them, tests/slurm.py), only when missing, so CI on a fresh machine runs those tests.
set -euo pipefail

if command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-slurm: slurm-wlm and munge are missing and installing them needs root (apt-get);" \
        "tests/test_batch_slurm.py will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
command -v slurmctld >/dev/null
