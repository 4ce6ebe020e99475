"""Session side: a grading slot per concurrent grading, and a uid per rank within it.

Every rank of every group of a grading runs under a uid of its own, which no account and no other
grading uses: ``kill(-1)`` from a rank reaches only that rank's processes, RLIMIT_NPROC counts only
them, and one student's ranks cannot read or signal another's.  A slot is held by an exclusive
``flock`` on a lock file for the lifetime of the matrix session; the kernel releases it however
the session ends, so a killed grading never leaks its slot.

uid = :data:`UID_BASE` + slot * :data:`UIDS_PER_SLOT` + offset of the world size + rank.  The
base lies above the subordinate-uid ranges ``useradd`` hands out (100000 + 65536 per user) for
the first hundreds of users; set ``GRADER_UID_BASE`` where that range is taken.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

UID_BASE = int(os.environ.get("GRADER_UID_BASE", "30000000"))
UIDS_PER_SLOT = 64
MAX_SLOTS = 1024
MAX_WORLD_SIZE = 10  # 1 + 2 + ... + 10 = 55 uids fit in a slot


@dataclass
class Slot:
    index: int
    fd: int  # the held lock

    def uid(self, world_size: int, rank: int) -> int:
        """The rank's uid (also its gid)."""
        if not 0 <= rank < world_size <= MAX_WORLD_SIZE:
            raise ValueError(f"rank {rank} of world size {world_size}: no uid for it")
        offset = world_size * (world_size - 1) // 2
        return UID_BASE + self.index * UIDS_PER_SLOT + offset + rank

    def release(self) -> None:
        os.close(self.fd)


def acquire(directory: Path | None = None) -> Slot:
    """The first free slot.  Root only (the lock directory is root's)."""
    import fcntl  # here: the module imports on every OS; slots exist only for root on Linux

    where = directory or _lock_directory()
    for index in range(MAX_SLOTS):
        fd = os.open(where / f"slot-{index}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return Slot(index, fd)
    raise OSError(f"all {MAX_SLOTS} grading slots are in use")


def _lock_directory() -> Path:
    """/run/dist-grader, or a root-only directory under the temp dir where /run is read-only."""
    for base in (Path("/run"), Path(tempfile.gettempdir())):
        where = base / "dist-grader-slots"
        try:
            where.mkdir(mode=0o700, exist_ok=True)
        except OSError:
            continue
        st = os.lstat(where)
        if st.st_uid == 0 and not (st.st_mode & 0o077) and os.path.isdir(where) and not os.path.islink(where):
            return where
    raise OSError("no directory for the grading slots' locks")
