#!/usr/bin/env bash
# Install Debian's PostgreSQL server for the service's tests (tests/postgres.py starts a throwaway
# cluster from its initdb and pg_ctl in a temporary directory), only when missing, so CI on a fresh
# machine runs the queue and database tests on PostgreSQL as well as SQLite.
set -euo pipefail

if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-postgres: postgresql is missing and installing it needs root (apt-get);" \
        "the service's PostgreSQL tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null
