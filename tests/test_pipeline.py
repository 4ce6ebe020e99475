"""`grader grade` end to end: what instructors, students and Classroom get for real submissions."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from grader.cli import main
from grader.results import GradeResult

if TYPE_CHECKING:
    from tests.conftest import Graded

ROOT = Path(__file__).resolve().parent.parent


def grade(tmp_path: Path, submission: Path | str, *extra: str) -> tuple[GradeResult, Path]:
    out = tmp_path / "out"  # a fresh tmp_path (or a new folder in it) per grade
    code = main(["grade", str(submission), "--out", str(out), "--format", "json", *extra])
    assert code == 0
    return GradeResult.load(out / "results.json"), out


@pytest.mark.slow
def test_reference_earns_full_marks_and_the_bonus(graded: Callable[[str], Graded]) -> None:
    result, out = graded("reference/a9").result, graded("reference/a9").out
    assert (result.score, result.max_score, result.bonus_score) == (105, 100, 5)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["results.json", "junit.xml", "gradescope.json", "classroom.json", "summary.md", "deliverables"]
    )
    # what a rescore reads again: the handed-in deliverables, byte for byte
    kept = sorted(p.name for p in (out / "deliverables").iterdir())
    assert kept == sorted(p.name for p in (ROOT / "reference" / "a9").iterdir() if p.suffix in (".md", ".pdf", ".png"))


@pytest.mark.slow
def test_star_shaped_reference_earns_full_marks_without_the_bonus(graded: Callable[[str], Graded]) -> None:
    result = graded("reference/a9-naive").result
    assert (result.score, result.bonus_score) == (100, 0)


@pytest.mark.slow
def test_untouched_template_scores_zero_and_every_item_says_why(graded: Callable[[str], Graded]) -> None:
    result = graded("student_template/a9").result
    assert result.score == 0
    for item in result.items():
        assert item.score == 0 and item.feedback, item.id
    assert "not implemented yet" in result.item("task1.allreduce").feedback


@pytest.mark.slow
def test_collectives_alone_earn_task1_and_task2_says_what_is_missing(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(ROOT / "reference/a9/src/collectives.py", flat / "collectives.py")
    result, _ = grade(tmp_path, flat)
    for name in ("broadcast", "allreduce", "allgather", "reduce_scatter", "all_to_all"):
        assert result.item(f"task1.{name}").score == 6
    for item in ("task2.tensor_parallel", "task2.ulysses"):
        assert result.item(item).score == 0
        assert "transformer.py" in result.item(item).feedback and "missing" in result.item(item).feedback


@pytest.mark.slow
def test_classroom_result_reports_exactly_the_score(graded: Callable[[str], Graded]) -> None:
    result, out = graded("reference/a9-naive").result, graded("reference/a9-naive").out
    encoded = base64.b64encode((out / "classroom.json").read_bytes()).decode()
    runner = json.loads(base64.b64decode(encoded))  # what the reporter decodes from GRADER_RESULTS
    points = 0.0
    for test in runner["tests"]:  # the reporter adds scores left to right, as JavaScript numbers
        points += test["score"]
    assert (points, runner["max_score"]) == (result.score, result.max_score)


def test_a_missing_submission_is_a_user_error_not_a_crash(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(tmp_path / "nope")], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "no such file" in proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the Linux sandbox's session host")
def test_a_grading_that_stops_before_its_matrix_leaves_no_session_host_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's host starts before intake (its torch import overlaps it); a submission intake
    refuses ends the grading there, and the host with it."""
    from grader import pipeline
    from grader.errors import UserError
    from grader.matrix.host import Host

    started: list[Host] = []
    take = Host.take

    def recorded() -> Host:
        started.append(take())
        return started[-1]

    monkeypatch.setattr(Host, "take", staticmethod(recorded))
    archive = tmp_path / "submission.zip"
    archive.write_bytes(b"not a zip archive")
    with pytest.raises(UserError, match="not a readable archive"):
        pipeline.grade(archive)
    assert len(started) == 1
    assert started[0].proc.returncode is not None  # ended and reaped
    assert started[0].log.closed


def test_a_grading_the_grader_could_not_finish_renders_everywhere_with_its_reason() -> None:
    from grader.pipeline import error_result
    from grader.render.classroom import render_classroom
    from grader.render.outputs import render
    from grader.rubric import load_rubric

    result = error_result(load_rubric(None), "sub/", "container grading failed (timeout): over 720 s")
    assert (result.status, result.score, result.max_score) == ("error", 0, 100)
    for fmt in ("json", "gradescope", "markdown", "terminal"):
        assert "over 720 s" in render(result, fmt), fmt
    classroom = render_classroom(result)
    assert (classroom["status"], classroom["max_score"]) == ("error", 100)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--pushed-at", "yesterday", "--pushed-at: 'yesterday' is not a time"),
        ("--submitted-at", "2025-13-01", "--submitted-at: '2025-13-01' is not a time"),
        ("--deadline", "soon", "--deadline: 'soon' is not a time"),
    ],
)
def test_a_time_that_is_no_time_is_the_users_error(
    tmp_path: Path, option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["grade", str(ROOT / "student_template" / "a9"), "--out", str(tmp_path), option, value]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def test_whatever_escapes_a_command_is_exit_2_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from grader import pipeline

    def broken(args: object) -> int:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(pipeline, "main", broken)
    assert main(["grade", "anything"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "internal error (a bug in the grader, not your fault): RecursionError" in err


@pytest.mark.slow
def test_a_deadline_without_a_trusted_time_leaves_lateness_to_the_instructor(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "reference/a9", repo)
    when = {"GIT_AUTHOR_DATE": "2026-01-20T12:00:00+00:00", "GIT_COMMITTER_DATE": "2026-01-20T12:00:00+00:00"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "late work"]):
        subprocess.run(
            ["git", "-c", "user.name=S", "-c", "user.email=s@example.org", *args],
            cwd=repo, env={**os.environ, **when}, check=True, capture_output=True,
        )  # fmt: skip
    deadline = ["--deadline", "2026-01-15T00:00:00+00:00"]
    result, out = grade(tmp_path / "unknown", repo, *deadline)
    assert (result.submission.submitted_at, result.submission.submitted_at_source.value) == (None, "unknown")
    assert (result.lateness.value, result.late, result.score) == ("unknown", None, 105)
    unknown = "submission time unknown"
    assert unknown in (out / "summary.md").read_text()
    assert unknown in json.loads((out / "gradescope.json").read_text())["output"]
    rows = {t["name"]: t for t in json.loads((out / "classroom.json").read_text())["tests"]}
    assert rows["late penalty"]["score"] == 0 and unknown in rows["late penalty"]["message"]

    trusted, _ = grade(tmp_path / "trusted", repo, *deadline, "--trust-commit-time")
    assert trusted.submission.submitted_at_source.value == "commit"
    assert (trusted.lateness.value, trusted.late and trusted.late.days_late, trusted.score) == ("late", 6, 52.5)


def test_the_docker_backend_hands_every_time_option_to_the_grader_in_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from grader.backends import docker

    seen: list[list[str]] = []

    def container(*args: object, extra_args: list[str], **kwargs: object) -> docker.ContainerOutcome:
        seen.append(extra_args)
        return docker.ContainerOutcome("start_failed", None, "not started in this test")

    monkeypatch.setattr(docker, "grade_in_container", container)
    options = ["--pushed-at", "1770282000", "--deadline", "2026-01-15T00:00:00Z", "--trust-commit-time"]
    code = main(
        ["grade", str(ROOT / "student_template" / "a9"), "--backend", "docker", "--out", str(tmp_path), *options]
    )
    assert code == 2  # the container did not start: the grader's error, with a result saying so
    assert seen == [options]
    roster = ["--submitted-at", "2026-01-14T00:00:00Z", "--submitted-at-source", "roster"]
    main(["grade", str(ROOT / "student_template" / "a9"), "--backend", "docker", "--out", str(tmp_path), *roster])
    assert seen[-1] == roster
