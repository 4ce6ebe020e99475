"""`grader grade` end to end: what instructors, students and Classroom get for real submissions."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.results import GradeResult

ROOT = Path(__file__).resolve().parent.parent


def grade(tmp_path: Path, submission: Path | str, *extra: str) -> tuple[GradeResult, Path]:
    out = tmp_path / "out"
    code = main(["grade", str(submission), "--out", str(out), "--format", "json", *extra])
    assert code == 0
    return GradeResult.load(out / "results.json"), out


@pytest.mark.slow
def test_reference_earns_full_marks_and_the_bonus(tmp_path: Path) -> None:
    result, out = grade(tmp_path, ROOT / "reference/a9")
    assert (result.score, result.max_score, result.bonus_score) == (105, 100, 5)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["results.json", "junit.xml", "gradescope.json", "classroom.json", "summary.md"]
    )


@pytest.mark.slow
def test_star_shaped_reference_earns_full_marks_without_the_bonus(tmp_path: Path) -> None:
    result, _ = grade(tmp_path, ROOT / "reference/a9-naive")
    assert (result.score, result.bonus_score) == (100, 0)


@pytest.mark.slow
def test_untouched_template_scores_zero_and_every_item_says_why(tmp_path: Path) -> None:
    result, _ = grade(tmp_path, ROOT / "student_template")
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
def test_classroom_result_reports_exactly_the_score(tmp_path: Path) -> None:
    result, out = grade(tmp_path, ROOT / "reference/a9-naive")
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
