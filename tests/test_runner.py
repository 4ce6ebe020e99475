"""How the runner waits for its matrix session: Popen's wait with its answers, woken by the exit itself.

Where Linux gives a pidfd the wait sleeps on it (issue 23: Popen's own timed wait polls in steps that
grow to 50 ms); the answers must be Popen's whatever the platform: the exit status, a signal as a
negative status, and ``TimeoutExpired`` with the process left running for the runner to stop.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grader import runner


def child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def test_the_wait_returns_the_sessions_exit_status() -> None:
    proc = child("import time, sys; time.sleep(0.3); sys.exit(3)")
    assert runner._wait(proc, 30) == 3
    assert proc.returncode == 3  # reaped: no zombie is left behind


def test_a_session_that_ended_before_the_wait_still_gives_its_status() -> None:
    proc = child("pass")
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.01)  # until it has exited; WNOWAIT leaves it unreaped, for the wait to find
    assert runner._wait(proc, 30) == 0


def test_a_session_killed_by_a_signal_has_a_negative_status() -> None:
    proc = child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert runner._wait(proc, 30) == -9


def test_a_session_that_outlives_the_timeout_raises_and_keeps_running() -> None:
    proc = child("import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            runner._wait(proc, 0.2)
        assert proc.poll() is None  # the runner stops it (runner._stop), not the wait
    finally:
        proc.kill()
        proc.wait()
