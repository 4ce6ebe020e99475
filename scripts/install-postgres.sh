#!/usr/bin/env bash
# Debian's PostgreSQL server for the service's tests (tests/postgres.py starts a throwaway cluster from
# its initdb and pg_ctl in a temporary directory), so they run on PostgreSQL as well as SQLite.
set -euo pipefail
# shellcheck source=scripts/apt-part.sh
source "$(dirname "$0")/apt-part.sh"
apt_part postgres "ls /usr/lib/postgresql/*/bin/pg_ctl" "the service's PostgreSQL tests will skip" postgresql
