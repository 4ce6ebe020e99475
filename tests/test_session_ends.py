"""Who is charged when the matrix session ends early: the submission only when its code had started.

A session killed while a case ran the submission's code is a ``crash`` of that case (a rank may have
done it); a session that dies before any case handed code to its ranks is the grader's own failure,
decided from the ledger the session writes (never from anything a rank says): results.json says
``status: error``, ``grader grade`` exits 2 and a batch records a ``grader_error``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader import runner
from grader.cli import main
from grader.junit import read_junit
from grader.matrix.plugin import STARTED, MatrixConfig
from grader.packs.a9 import catalog
from grader.results import GradeResult

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
