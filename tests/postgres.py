"""A real, throwaway PostgreSQL for the service's tests, from Debian's ``postgresql``
(``scripts/install-postgres.sh``): ``initdb`` into a temporary directory, ``pg_ctl start`` on a unix
socket there (no TCP port to collide on), as the ``postgres`` user when the tests run as root; on exit
``pg_ctl stop -m immediate`` and the directory removed."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def binaries() -> Path | None:
    """The newest installed server's bin directory, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[4]))
    return Path(found[-1]).parent if found else None


def unavailable() -> str:
    if binaries() is None:
        return "PostgreSQL is not installed: scripts/install-postgres.sh installs it"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "no postgres user to run the server as"
    return ""


@contextlib.contextmanager
def cluster() -> Iterator[str]:
    """A running server; yields a SQLAlchemy URL of its ``postgres`` database."""
    bin_dir = binaries()
    assert bin_dir is not None
    root = Path(tempfile.mkdtemp(prefix="grader-pg-"))
    data, sockets = root / "data", root / "run"
    sockets.mkdir()
    user: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        entry = pwd.getpwnam("postgres")
        for path in (root, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        user = ["runuser", "-u", "postgres", "--"]
    run = lambda *cmd: subprocess.run([*user, *cmd], check=True, capture_output=True, text=True, cwd=root)  # noqa: E731
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-k {sockets} -c listen_addresses='' -c fsync=off -c max_connections=50"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-o", options, "-w", "start")
        try:
            yield f"postgresql+psycopg://postgres@/postgres?host={sockets}"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
