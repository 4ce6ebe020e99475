# shellcheck shell=bash
# Sourced by scripts/install-{chromium,slurm,postgres}.sh: a Debian package set the tests drive as a real
# part (a browser, a cluster, a database), installed only when its check fails, so CI on a fresh machine
# gets it and a machine that already has it pays nothing.  The package lists are fetched at most once
# in six hours, not once per part.
#
#   apt_part NAME "CHECK COMMAND" "WHAT WITHOUT IT" PACKAGE...
#
# WHAT WITHOUT IT empty: the part is required, and a machine without it and without root fails;
# otherwise its tests skip, and that sentence says which.

apt_part() {
    local name=$1 check=$2 without=$3
    shift 3
    if eval "$check" >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        if [ -z "$without" ]; then
            echo "install-$name: $* missing, and installing them needs root (apt-get)" >&2
            return 1
        fi
        echo "install-$name: $* missing, and installing them needs root (apt-get); $without" >&2
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -360 2>/dev/null | head -n 1)" ]; then
        apt-get update -qq
    fi
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    eval "$check" >/dev/null 2>&1
}
