"""How the runner waits for its matrix session: Popen's wait with its answers, woken by the exit itself.

Where Linux gives a pidfd the wait sleeps on it (issue 23: Popen's own timed wait polls in steps that
grow to 50 ms); the answers must be Popen's whatever the platform: the exit status, a signal as a
negative status, and ``TimeoutExpired`` with the process left running for the runner to stop.  While
it waits it watches the session's ledger: one that stops growing for the stall limit is a hung host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader import runner


def child(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """The session's ledger, empty as each start of the cases makes it."""
    path = tmp_path / "ledger.jsonl"
    path.write_text("")
    return path


STALL_S = 30.0  # longer than any of these waits: only the stall tests reach theirs


def test_the_wait_returns_the_sessions_exit_status(ledger: Path) -> None:
    proc = child("import time, sys; time.sleep(0.3); sys.exit(3)")
    assert runner._wait(proc, 30, ledger, STALL_S) == 3
    assert proc.returncode == 3  # reaped: no zombie is left behind


def test_a_session_that_ended_before_the_wait_still_gives_its_status(ledger: Path) -> None:
    proc = child("pass")
    while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        time.sleep(0.01)  # until it has exited; WNOWAIT leaves it unreaped, for the wait to find
    assert runner._wait(proc, 30, ledger, STALL_S) == 0


def test_a_session_killed_by_a_signal_has_a_negative_status(ledger: Path) -> None:
    proc = child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert runner._wait(proc, 30, ledger, STALL_S) == -9


def test_a_session_that_outlives_the_timeout_raises_and_keeps_running(ledger: Path) -> None:
    proc = child("import time; time.sleep(60)")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            runner._wait(proc, 0.2, ledger, STALL_S)
        assert proc.poll() is None  # the runner stops it (runner._stop), not the wait
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process that outlives any wait of these tests: a session that never ends by itself."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_a_session_whose_ledger_stays_still_past_the_stall_limit_is_stalled(
    ledger: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    with pytest.raises(runner._Stalled):
        runner._wait(sleeper, 60.0, ledger, stall_s=0.5)
    assert sleeper.poll() is None  # the runner ends it (_stop), not the wait


def test_a_session_that_keeps_deciding_cases_is_waited_for_until_its_time_limit(
    ledger: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    done = threading.Event()

    def decide() -> None:  # a case every 50 ms, well inside the stall limit
        while not done.wait(0.05):
            with ledger.open("a") as f:
                f.write('{"case": "c", "verdict": "pass"}\n')

    writer = threading.Thread(target=decide)
    writer.start()
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            runner._wait(sleeper, 3.0, ledger, stall_s=1.0)
    finally:
        done.set()
        writer.join()
