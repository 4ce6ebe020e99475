"""Temporary directories a SIGKILL cannot leave behind for good.

A grading killed with SIGKILL runs no ``finally``: its work directory (``grader-work-*``) and its
session's rank-group directories (``grader-ws<N>-*``) stay in the temporary directory, as does a local
Dask cluster's (``grader-dask-*``) when the batch or service that started it is killed.  Each is made
here and holds an ``flock`` on itself for as long as its maker lives (the lock is the open file
description's: the kernel drops it when the process dies, however it dies).  The next grading's
:func:`sweep` removes every sibling whose lock it can take: nobody alive owns it.

The temporary directory is world-writable and we are often root, so the sweep trusts nothing it
finds: it never follows a symlink, removes only directories owned by its own uid (the sticky bit
keeps other users from renaming them under it), holds the lock while it removes, and leaves alone
a directory younger than ``GRACE_S`` (its maker may not have locked it yet).  Windows has no
``flock`` (and a platform whose ``rmtree`` may follow a symlink swapped in is not trusted with the
sweep): there the directories are made unlocked and the sweep does nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

#: The names made here; nothing else in the temporary directory is ever swept (``grader-out-*``
#: holds a user's results, ``grader-intake-*`` and the like are not locked).
SWEPT = re.compile(r"grader-(work|ws\d+|dask)-")
GRACE_S = 60.0  # a directory younger than this may be between its mkdtemp and its lock
NO_LOCKS = "this platform has no flock: a live grading's directories cannot be told from orphans"


class Lock:
    """The lock a directory holds on itself; released by :meth:`close` or when garbage-collected
    (a rank group's directory lives as long as its group object)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


def make(prefix: str) -> tuple[Path, Lock]:
    """``tempfile.mkdtemp(prefix=prefix)``, locked by this process until the returned lock is closed."""
    assert SWEPT.match(prefix), f"{prefix!r}: a directory sweep() does not know"
    path = Path(tempfile.mkdtemp(prefix=prefix))
    if fcntl is None:
        return path, Lock(-1)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    fcntl.flock(fd, fcntl.LOCK_EX)  # never blocks: a sweep only holds a lock on a dir older than GRACE_S
    return path, Lock(fd)


def sweep(root: Path | None = None, grace_s: float = GRACE_S) -> list[Path]:
    """Remove the directories of dead gradings in ``root`` (the temporary directory); return them."""
    if fcntl is None or not shutil.rmtree.avoids_symlink_attacks:
        return []
    root = Path(root or tempfile.gettempdir())
    swept = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        if SWEPT.match(entry.name) and _remove_if_orphan(root / entry.name, grace_s):
            swept.append(root / entry.name)
    return swept


def _remove_if_orphan(path: Path, grace_s: float) -> bool:
    try:
        seen = os.lstat(path)
        if not stat.S_ISDIR(seen.st_mode) or seen.st_uid != os.getuid():  # a symlink, or not ours
            return False
        if time.time() - seen.st_mtime < grace_s:
            return False
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:  # gone already, or replaced by a symlink since the lstat
        return False
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its grading is alive
            return False
        shutil.rmtree(path, ignore_errors=True)  # fd-based on Linux: no symlink inside it is followed
        return True
    finally:
        os.close(fd)
