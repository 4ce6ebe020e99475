"""What a full-sandbox rank group's init says on its report pipe, one JSON line at a time: whether the
group has a PID namespace, each rank's pid as init knows it, and how each rank ended (exit status or
signal).  The session believes init, never the rank, about how a rank ended; a line that is not what
init writes is skipped, and a line is read up to ``MAX_LINE`` bytes."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time

from grader.runtimes.torchdist.runs import RankReport, drain

DEATH_WAIT_S = 1.0  # for init's word on how a rank whose pipe closed ended
MAX_LINE = 256


class InitLines:
    """The group's end of init's report pipe, and what it has said so far."""

    def __init__(self, fd: int = -1) -> None:
        self.fd = fd  # non-blocking; -1 before the group starts and once it is closed
        self.pid_namespace = "off: the group's leader did not say"
        self.ns_pids: dict[int, int] = {}  # rank -> its pid as init knows it
        self.ended: dict[int, str] = {}  # rank -> "status:message", how init saw it end
        self._buf = b""

    def read(self) -> None:
        """Take in the lines that have come: {"pid_namespace"}, {"rank", "pid"} when init forked a
        rank, {"rank", "exit"|"signal"} when one ended."""
        self._buf += drain(self.fd)
        *lines, self._buf = self._buf.split(b"\n")
        self._buf = self._buf[:MAX_LINE]
        for line in lines:
            try:
                message = json.loads(line)
                if "pid_namespace" in message:
                    self.pid_namespace = str(message["pid_namespace"])
                    continue
                r = int(message["rank"])
            except (ValueError, KeyError, TypeError):
                continue
            if "pid" in message:
                self.ns_pids[r] = int(message["pid"])
            elif "signal" in message:
                name = signal.Signals(int(message["signal"])).name
                self.ended[r] = f"signaled:rank {r} was killed by {name}"
            elif "exit" in message:
                self.ended[r] = f"exited:rank {r} exited with status {int(message['exit'])} during the case"

    def wait(self, timeout_s: float) -> None:
        """Until init says more, at most ``timeout_s``."""
        select.select([self.fd], [], [], timeout_s)
        self.read()

    def death(self, r: int) -> RankReport:
        """Rank ``r``'s result pipe closed without a reply: how init says it ended."""
        deadline = time.monotonic() + DEATH_WAIT_S
        while r not in self.ended and time.monotonic() < deadline:
            self.wait(0.02)
        said = self.ended.get(r, f"exited:rank {r} closed its result pipe without replying")
        status, _, message = said.partition(":")
        return RankReport(r, status, message)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
