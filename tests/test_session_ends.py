"""Who is charged when the matrix session ends early: the submission only when its code had started.

A session killed while a case ran the submission's code is a ``crash`` of that case (a rank may have
done it); a session that dies before any case handed code to its ranks is the grader's own failure,
decided from the ledger the session writes (never from anything a rank says): results.json says
``status: error``, ``grader grade`` exits 2 and a batch records a ``grader_error``.  A session that
stops deciding cases for longer than all its own waits together (a hung host) is ended and every case
runs again, charging the submission nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from grader import runner
from grader.cli import main
from grader.junit import read_junit
from grader.limits import Limits
from grader.matrix.plugin import STARTED, MatrixConfig
from grader.packs.a9 import catalog
from grader.pipeline import grade
from grader.results import GradeResult
from grader.salt import SALT_ENV
from tests.processes import cases_decided, descendants

ROOT = Path(__file__).resolve().parent.parent
ONLY = [name for name in catalog.all_case_ids() if name.startswith("test_allreduce[ws2-")][:2]


def killed_sessions(monkeypatch: pytest.MonkeyPatch, started: list[str]) -> None:
    """Every session dies by SIGKILL; the first writes a STARTED line for each of ``started`` first (the
    later ones die before any case: after the submission's code ran, that too is charged to it, as a
    group that cannot start is in ``MatrixSession._start_failure``)."""
    rounds: list[int] = []

    def session(config: MatrixConfig, *args: object) -> tuple[int, str]:
        if not rounds:
            with open(config.ledger, "a") as ledger:
                ledger.writelines(json.dumps({STARTED: name}) + "\n" for name in started)
        rounds.append(1)
        return -9, "Traceback: the grader's own output\n"

    monkeypatch.setattr(runner, "_session", session)


def run(tmp_path: Path) -> runner.MatrixRun:
    return runner.run_matrix(tmp_path, [], tmp_path / "work", {}, {}, salt="test", pack="a9", only=ONLY)


def test_a_session_killed_before_any_student_code_is_the_graders_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    killed_sessions(monkeypatch, started=[])
    with pytest.raises(runner.SessionFailed, match=r"killed before any case ran the submission's code") as failed:
        run(tmp_path)
    assert "the grader's own output" in failed.value.log


def test_a_session_killed_while_student_code_ran_is_a_crash_of_that_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    killed_sessions(monkeypatch, started=[ONLY[0]])
    cases = read_junit(run(tmp_path).junit)
    assert cases[ONLY[0]].verdict.value == "crash"
    assert "a rank may have killed it" in cases[ONLY[0]].message


@dataclass(frozen=True)
class UnknownToTheSession(MatrixConfig):
    """A configuration the session cannot load: it dies at its start, before the first case."""

    unknown: int = 1


def test_a_session_that_cannot_start_makes_the_grading_an_error_not_a_score(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "MatrixConfig", UnknownToTheSession)
    out = tmp_path / "out"
    assert main(["grade", str(ROOT / "reference" / "a9"), "--out", str(out), "--format", "json"]) == 2
    result = GradeResult.load(out / "results.json")
    assert result.status == "error" and result.score == 0 and result.tasks == []
    assert result.error is not None and "before any case ran the submission's code" in result.error


def test_the_stall_limit_outlasts_every_wait_a_session_makes_between_two_cases() -> None:
    from grader.runtimes.torchdist.portable import SPAWN_S

    limits = Limits()
    waits = limits.start_timeout_s + SPAWN_S + 4 * limits.case_timeout_s  # a start, a probe, a calibration, two steps
    assert runner.stall_after_s(asdict(limits)) > waits


def _stop_once_a_session_decided_a_case(stopped: list[int], done: threading.Event) -> None:
    """SIGSTOP the first session once it has decided a case: from then on it decides nothing, as a hung
    host would."""
    while not done.is_set():
        for pid in descendants(os.getpid()):
            if cases_decided(pid):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
                return
        time.sleep(0.005)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the session's directory from /proc")
def test_a_session_that_stops_deciding_cases_is_ended_and_every_case_graded_again(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The first session hangs after its first case (SIGSTOP) and is given a 3 s stall limit; the grading
    starts every case again under the real limit, and gives what an undisturbed grading gives."""
    monkeypatch.setenv(SALT_ENV, "one salt for both gradings")
    tree = ROOT / "reference" / "a9"
    alone = grade(tree, keyword="test_broadcast")
    limits_given: list[float] = []
    real = runner.stall_after_s

    def first_short(limits: dict[str, Any]) -> float:
        limits_given.append(3.0 if not limits_given else real(limits))
        return limits_given[-1]

    monkeypatch.setattr(runner, "stall_after_s", first_short)
    stopped: list[int] = []
    done = threading.Event()
    watcher = threading.Thread(target=_stop_once_a_session_decided_a_case, args=(stopped, done))
    watcher.start()
    try:
        began = time.monotonic()
        disturbed = grade(tree, keyword="test_broadcast")
        took = time.monotonic() - began
    finally:
        done.set()
        watcher.join()
    assert stopped, "no session was stopped"
    assert not Path(f"/proc/{stopped[0]}").exists()  # ended, not left stopped
    assert len(limits_given) == 2 and took >= 3.0
    assert "the session decided no case for 3 s" in capfd.readouterr().err
    assert disturbed.status == "graded"
    assert [(c.id, c.verdict, c.message) for c in disturbed.cases] == [
        (c.id, c.verdict, c.message) for c in alone.cases
    ]
    assert disturbed.score == alone.score > 0


def test_a_session_that_stalls_at_every_start_is_the_graders_failure_not_cases_left_unrun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[int] = []

    def stalled(config: MatrixConfig, *args: object) -> tuple[int, str]:
        starts.append(1)
        with open(config.ledger, "a") as ledger:  # the submission's code had run: still not its doing
            ledger.write(json.dumps({STARTED: ONLY[0]}) + "\n")
        raise runner.HostStalled("the session decided no case for 300 s", "the host's output")

    monkeypatch.setattr(runner, "_session", stalled)
    with pytest.raises(runner.SessionFailed, match="decided no case"):
        run(tmp_path)
    assert len(starts) == runner.HOST_ATTEMPTS
