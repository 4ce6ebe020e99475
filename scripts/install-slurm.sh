#!/usr/bin/env bash
# Debian's Slurm and munge for tests/test_batch_slurm.py (its fixture starts a single-node Slurm from
# them, tests/slurm.py).
set -euo pipefail
# shellcheck source=scripts/apt-part.sh
source "$(dirname "$0")/apt-part.sh"
apt_part slurm "command -v slurmctld && command -v slurmd && command -v munged" \
    "tests/test_batch_slurm.py will skip" slurm-wlm munge
