"""Words where code was asked go to an instructor (issue 37): an A5 code question answered in prose
only is ``pending_review``, its words quoted in the item's feedback (every output renders it) and
flagged ``review`` in the gradebook; an instructor's manual score then counts.  A question with
neither code nor words still scores 0.  Scored from a hand-written matrix run (every case
``not_implemented``, as an unplaced snippet makes it), so no grading runs here."""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

from grader.gradebook import flags_for
from grader.manual import ManualScores
from grader.pack import load_pack
from grader.packs.a5.pack import review
from grader.render.markdown import render_markdown
from grader.render.student_report import render_student_report
from grader.results import GradeResult, ItemStatus, SubmissionInfo
from grader.rubric import load_rubric
from grader.scoring import score

ROOT = Path(__file__).resolve().parent.parent
Q7_WORDS = (
    "recv_forward returns None on the first stage, send_forward on the last, recv_backward on the last "
    "and send_backward on the first; every other stage communicates."
)
REPORT = f"""# Report

## Q2

## Q7: pipeline_communicate

{Q7_WORDS}

```answers
recv_forward: [1, 2, 3]
```

## Q5

```python
def distribute_layers(num_layers, pp_rank, pp_world_size):
    return []
```

It splits the layers evenly.
"""


@pytest.fixture
def submitted(tmp_path: Path) -> Path:
    (tmp_path / "report.md").write_text(REPORT)
    return tmp_path


def not_implemented(path: Path) -> Path:
    """A matrix run in which every A5 case failed as an unplaced snippet's does."""
    rows = [
        f'<testcase classname="test_a5" name={quoteattr(case.name)}><properties>'
        '<property name="verdict" value="not_implemented" /><property name="message" value="not placed" />'
        "</properties></testcase>"
        for case in load_pack("a5").cases()
    ]
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(rows)}</testsuite></testsuites>')
    return path


def graded(root: Path, manual: ManualScores | None = None) -> GradeResult:
    rubric = load_rubric(ROOT / "rubrics/a5.yaml")
    info = SubmissionInfo("report", {}, "sha256:0")
    return score(rubric, not_implemented(root / "junit.xml"), info, [], root, manual)


def test_only_a_code_question_answered_in_words_alone_is_found(submitted: Path) -> None:
    # Q5 has code (graded as code); Q2 has nothing; Q7's words stand for both its kinds of case
    assert review(submitted) == {"q7": Q7_WORDS, "q7_pipelined": Q7_WORDS}


def test_code_asked_and_words_given_waits_for_an_instructor_who_reads_them(submitted: Path) -> None:
    result = graded(submitted)
    q7 = result.item("q7_communicate.code")
    assert (q7.score, q7.status, q7.manual) == (0.0, ItemStatus.PENDING_REVIEW, True)
    assert q7.feedback.startswith("answered in words where code was asked: an instructor reads them")
    assert f"  > {Q7_WORDS}" in q7.feedback
    for output in (render_markdown(result), render_student_report(result)):  # escaped, but quoted
        assert "on the first; every other stage communicates." in output
    assert "review" in flags_for("graded", result)
    for silent in ("q2_assertions.code", "q5_distribute_layers.code", "q4_baseline.code"):
        assert (result.item(silent).score, result.item(silent).status) == (0.0, ItemStatus.FAILED)


def test_the_instructors_score_for_words_counts(submitted: Path) -> None:
    result = graded(submitted, ManualScores(scores={"q7_communicate.code": 9.0}, comments={}))
    q7 = result.item("q7_communicate.code")
    assert (q7.score, q7.status) == (9.0, ItemStatus.MANUAL)
    assert q7.feedback.startswith("scored by an instructor: 9/12")


def test_a_written_question_with_no_words_scores_0_and_one_with_words_waits(tmp_path: Path) -> None:
    """Q1 (words only, an instructor marks it) and the answer forms of Q3, Q6 and Q7: silence is 0,
    'no answer found', never a wait for review; words wait as before."""
    (tmp_path / "report.md").write_text("# Report\n\n## Q1\n\n## Q3\n\n## Q6\n\nOnly the first stage.\n")
    result = graded(tmp_path)
    q1 = result.item("q1_seeding.explanation")
    assert (q1.score, q1.status, q1.feedback) == (0.0, ItemStatus.FAILED, "no answer found under a '## Q1' heading")
    q3 = result.item("q3_tensor_shapes.written")
    assert (q3.score, q3.status) == (0.0, ItemStatus.AUTO_CHECKED)
    assert q3.feedback == "report.md: no answer found under '## Q3'\nQ3 (0/4): no answer found"
    assert result.item("q6_dataloader.written").status is ItemStatus.PENDING_REVIEW  # words, no form
    (tmp_path / "report.md").write_text("## Q1\n\nDifferent seeds per stage, the same across data parallel.\n")
    assert graded(tmp_path).item("q1_seeding.explanation").status is ItemStatus.PENDING_REVIEW
