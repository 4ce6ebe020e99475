"""Deliverables: a diagram is recognised by its bytes, written answers are marked against the rubric's key."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from grader.deliverables import answer_sections, check_diagram, check_written, normalize
from grader.rubric import WrittenScoring, load_rubric

FIXTURES = Path(__file__).parent / "fixtures" / "scoring"
A9 = Path(__file__).parent.parent / "rubrics" / "a9.yaml"
DIAGRAM = ["all_to_all_schematic.pdf", "all_to_all_schematic.png"]
WRITTEN = ["written_answers_task1.md", "written_answers_task1.pdf"]
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">II5B", width, height, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\0\0\0\0"


@pytest.fixture(scope="module")
def key():
    scoring = load_rubric(A9).item("task1.written").scoring
    assert isinstance(scoring, WrittenScoring)
    return scoring.questions


# --------------------------------------------------------------------------- diagram


@pytest.mark.parametrize(
    ("name", "content", "ok", "says"),
    [
        ("all_to_all_schematic.pdf", PDF, True, "all_to_all_schematic.pdf is a PDF"),
        ("all_to_all_schematic.png", png(800, 600), True, "is a 800x600 PNG"),
        ("all_to_all_schematic.png", png(0, 600), False, "empty PNG (0x600)"),
        ("all_to_all_schematic.png", PDF, False, "not a PNG image"),
        ("all_to_all_schematic.pdf", png(800, 600), False, "not a PDF"),
        ("all_to_all_schematic.pdf", PDF[:-7], False, "looks truncated"),
        ("all_to_all_schematic.pdf", b"", False, "not a PDF"),
        ("all_to_all_schematic.png", b"\x89PNG\r\n\x1a\n", False, "not a PNG image"),
    ],
)
def test_diagram_format_is_judged_by_its_bytes(tmp_path, name, content, ok, says):
    (tmp_path / name).write_bytes(content)
    result = check_diagram(tmp_path, DIAGRAM)
    assert result[0] is ok
    assert says in result[1]


def test_missing_diagram_names_the_files_expected(tmp_path):
    (tmp_path / "diagram.png").write_bytes(png(10, 10))
    assert check_diagram(tmp_path, DIAGRAM) == (
        False,
        "all_to_all_schematic.pdf or all_to_all_schematic.png missing",
    )


def test_first_candidate_present_is_the_one_checked(tmp_path):
    (tmp_path / "all_to_all_schematic.pdf").write_bytes(b"not a pdf")
    (tmp_path / "all_to_all_schematic.png").write_bytes(png(10, 10))
    assert check_diagram(tmp_path, DIAGRAM)[0] is False


# --------------------------------------------------------------------------- written answers


def test_model_answer_earns_every_point(tmp_path, key):
    (tmp_path / "written_answers_task1.md").write_bytes((FIXTURES / "written_answers_task1.md").read_bytes())
    result = check_written(tmp_path, WRITTEN, key)
    assert (result.file, result.pending) == ("written_answers_task1.md", False)
    assert [(q.id, q.points, q.max_points, q.feedback) for q in result.questions] == [
        ("Q1", 5, 5, "correct"),
        ("Q2", 5, 5, "correct"),
        ("Q3", 5, 5, "correct"),
    ]


def test_answers_in_prose_with_other_headings_are_recognised(tmp_path, key):
    (tmp_path / "written_answers_task1.md").write_text(
        "**Question 1**\nAll ranks print x = 20.0 and y = 20.0: the broadcast is in-place.\n\n"
        "**Question 2**\nroot: 3, then 6, then 10. Finally 10.0 is printed on all ranks.\n\n"
        "**Question 3**\nshape (6,) everywhere; y = 0, 10, 1, 11, 2, 12 on each rank.\n"
    )
    assert [q.points for q in check_written(tmp_path, WRITTEN, key).questions] == [5, 5, 5]


def test_ranks_listed_between_every_rank_and_the_value_still_count(tmp_path, key):
    (tmp_path / "written_answers_task1.md").write_text(
        "## Q2\nAfter each receive: 3, 6, 10. Every rank (0, 1, 2 and 3) prints 10.0 after the broadcast.\n"
    )
    assert check_written(tmp_path, WRITTEN, key).questions[1].points == 5


def test_wrong_answers_lose_the_points_they_miss_and_say_which(tmp_path, key):
    (tmp_path / "written_answers_task1.md").write_text(
        "Q1\n| rank | x | y |\n| 0 | 10.0 | 20.0 |\n| 1 | 20.0 | 20.0 |\n| 2 | 30.0 | 20.0 |\n| 3 | 40.0 | 20.0 |\n"
        "Only y changes: broadcast returns a new tensor.\n"
        "Q2\nAfter each receive: 2, 3, 4. Every rank prints 10.\n"
        "Q3\nshape [6]; content [0, 1, 2, 10, 11, 12]\n"
    )
    q1, q2, q3 = check_written(tmp_path, WRITTEN, key).questions
    assert (q1.points, q2.points, q3.points) == (0, 2.5, 2.5)
    assert q1.feedback == (
        "not found in your answer: x and y print 20.0 on every rank; "
        "why: broadcast works in place, so x itself is overwritten with rank 1's value"
    )
    assert q2.feedback == "not found in your answer: the accumulator is 3, then 6, then 10"
    assert q3.feedback == "not found in your answer: y is [0, 10, 1, 11, 2, 12] on every rank"


def test_an_answer_without_its_heading_scores_nothing_and_says_how_to_fix_it(tmp_path, key):
    (tmp_path / "written_answers_task1.md").write_text("Q1\nx = y = 20.0 on every rank, in place.\n")
    marks = check_written(tmp_path, WRITTEN, key).questions
    assert marks[1].points == 0
    assert marks[1].feedback == "no answer found: start it with a heading line such as '## Q2'"


@pytest.mark.parametrize("text", ["", "my answers are in my head\n"])
def test_answers_without_any_heading_score_nothing_and_say_how_to_fix_it(tmp_path, key, text):
    (tmp_path / "written_answers_task1.md").write_text(text)
    marks = check_written(tmp_path, WRITTEN, key).questions
    assert [m.points for m in marks] == [0] * len(key)
    assert marks[0].feedback == "no answer found: start it with a heading line such as '## Q1'"


def test_pdf_answers_wait_for_an_instructor(tmp_path, key):
    (tmp_path / "written_answers_task1.pdf").write_bytes(PDF)
    result = check_written(tmp_path, WRITTEN, key)
    assert (result.file, result.pending) == ("written_answers_task1.pdf", True)
    assert "marked by an instructor" in result.message
    assert {q.points for q in result.questions} == {0}


def test_missing_answers(tmp_path, key):
    result = check_written(tmp_path, WRITTEN, key)
    assert (result.file, result.pending) == (None, False)
    assert result.message == "written_answers_task1.md or written_answers_task1.pdf missing"


def test_sections_run_from_heading_to_heading_and_text_is_normalized():
    sections = answer_sections("intro\n## Q1\none *two*\n### q2:\n`three`\nQ1 again\n")
    assert sections == {"Q1": "\none *two*\n", "Q2": ":\n`three`\n"}
    assert normalize("| A | `B` |\n\n**C_d**") == "a b c d"
