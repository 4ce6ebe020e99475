"""A shared-memory status slot per rank: what each rank is doing right now.

The runner reads it to tell a deadlock (every unfinished rank blocked in communication, nothing
changing) from slow code, and to name the blocked call in the verdict ("rank 1 waits in
recv(src=0) at collectives.py:17").  A rank can write garbage into its own slot; the runner only
ever shows it as text, so that costs the student nothing but their own diagnosis.
"""

from __future__ import annotations

import mmap
import struct

_SLOT = 256
_HEAD = struct.Struct("<BI")  # state, sequence number (bumped on every write)


class StatusBoard:
    RUNNING = 0
    BLOCKED = 1  # inside send/recv/wait or an allowed built-in collective
    IMPORTING = 2  # importing a student module
    DONE = 3  # replied to the current case
    IDLE = 4

    def __init__(self, world_size: int) -> None:
        # MAP_SHARED and anonymous: created before fork, shared with every rank of the group
        self._mm = mmap.mmap(-1, world_size * _SLOT)
        self._seq = [0] * world_size
        for rank in range(world_size):
            self.set(rank, self.IDLE, "")

    def set(self, rank: int, state: int, text: str) -> None:
        self._seq[rank] += 1
        data = text.encode("utf-8", "replace")[: _SLOT - _HEAD.size - 1]
        base = rank * _SLOT
        self._mm[base : base + _SLOT] = _HEAD.pack(state, self._seq[rank] & 0xFFFFFFFF) + data.ljust(
            _SLOT - _HEAD.size, b"\0"
        )

    def get(self, rank: int) -> tuple[int, int, str]:
        base = rank * _SLOT
        state, seq = _HEAD.unpack_from(self._mm, base)
        raw = bytes(self._mm[base + _HEAD.size : base + _SLOT]).split(b"\0", 1)[0]
        return state, seq, raw.decode("utf-8", "replace")

    def close(self) -> None:
        self._mm.close()
