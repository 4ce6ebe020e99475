"""A shared-memory status slot per rank: what each rank says it is doing right now.

The session reads the slots to tell a deadlock (every unfinished rank blocked in communication,
nothing changing) from slow code, and to name the blocked call in the verdict ("rank 1 waits in
recv(src=0) at collectives.py:17").  Each slot is its own memfd, mapped by the session and by its
one rank, so ranks share no memory with each other through it.  A rank can write garbage into its
slot; the session only ever shows it as text, so that costs the student nothing but their own
diagnosis (and a rank that claims to be blocked while it computes is judged by its CPU time).
"""

from __future__ import annotations

import mmap
import os
import struct

SLOT_SIZE = 256
_HEAD = struct.Struct("<BI")  # state, sequence number (bumped on every write)


class StatusSlot:
    RUNNING = 0
    BLOCKED = 1  # inside send/recv/wait or an allowed built-in collective
    IMPORTING = 2  # importing a student module
    DONE = 3  # replied to the current case
    IDLE = 4

    def __init__(self, fd: int) -> None:
        self._mm = mmap.mmap(fd, SLOT_SIZE)  # MAP_SHARED: the other side sees every write
        self._seq = 0

    @classmethod
    def create(cls) -> tuple[StatusSlot, int]:
        """A new slot (IDLE) and the descriptor to hand to its rank."""
        fd = os.memfd_create("grader-status", os.MFD_CLOEXEC)
        os.ftruncate(fd, SLOT_SIZE)
        slot = cls(fd)
        slot.set(cls.IDLE, "")
        return slot, fd

    def set(self, state: int, text: str) -> None:
        self._seq += 1
        data = text.encode("utf-8", "replace")[: SLOT_SIZE - _HEAD.size - 1]
        self._mm[:SLOT_SIZE] = _HEAD.pack(state, self._seq & 0xFFFFFFFF) + data.ljust(SLOT_SIZE - _HEAD.size, b"\0")

    def get(self) -> tuple[int, int, str]:
        state, seq = _HEAD.unpack_from(self._mm, 0)
        raw = bytes(self._mm[_HEAD.size : SLOT_SIZE]).split(b"\0", 1)[0]
        return state, seq, raw.decode("utf-8", "replace")

    def close(self) -> None:
        self._mm.close()
