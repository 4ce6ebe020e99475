"""Deliverables: a diagram is recognised by its bytes; written answers are read from their form, never from prose."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from grader.deliverables import answer_sections, check_advice, check_diagram, check_written
from grader.errors import UserError
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

REFERENCE = Path(__file__).parent.parent / "reference" / "a9" / "written_answers_task1.md"
TEMPLATE = Path(__file__).parent.parent / "student_template" / "a9" / "written_answers_task1.md"
WHY = "Broadcast writes into x in place, so y is x and both print the source's value."


def answers(tmp_path: Path, text: str) -> Path:
    (tmp_path / "written_answers_task1.md").write_text(text)
    return tmp_path


def form(qid: str, fields: str, explanation: str = WHY) -> str:
    return f"## {qid}\n\n```answers\n{fields}\n```\n\n{explanation}\n"


Q1_RIGHT = "\n".join(f"rank{r}.{v}: 20.0" for r in range(4) for v in "xy")


def test_the_reference_answers_earn_every_point_with_the_explanations_provisional(tmp_path, key):
    result = check_written(answers(tmp_path, REFERENCE.read_text()), WRITTEN, key)
    assert (result.file, result.pending) == ("written_answers_task1.md", False)
    assert [(q.id, q.points, q.provisional) for q in result.questions] == [("Q1", 5, 1), ("Q2", 5, 1), ("Q3", 5, 1)]
    assert result.questions[0].feedback == (
        "8/8 fields right; explanation: 1 point(s) provisional until an instructor reads it"
    )


def test_the_untouched_template_earns_nothing(tmp_path, key):
    result = check_written(answers(tmp_path, TEMPLATE.read_text()), WRITTEN, key)
    assert [q.points for q in result.questions] == [0, 0, 0]
    assert result.questions[2].feedback == (
        "0/4 fields right; missing: shape, rank0, rank1, rank2; "
        "explanation: none found (write it under the answers block)"
    )


@pytest.mark.parametrize(
    "value",
    ["20.0", "20", "20.", "2e1", "[20.0]", "tensor([20.])", "20.0."],  # the number, however it is printed
)
def test_a_field_is_the_number_it_states(tmp_path, key, value):
    fields = Q1_RIGHT.replace("rank2.y: 20.0", f"rank2.y: {value}")
    assert check_written(answers(tmp_path, form("Q1", fields)), WRITTEN, key).questions[0].points == 5


@pytest.mark.parametrize(
    "value",
    ["not 20", "20 or 10", "maybe 20", "~20", "20?", "20 (I think)", "it is not true that it prints 20", "twenty"],
)
def test_a_negated_or_hedged_field_is_unreadable_and_earns_nothing(tmp_path, key, value):
    fields = Q1_RIGHT.replace("rank2.y: 20.0", f"rank2.y: {value}")
    q1 = check_written(answers(tmp_path, form("Q1", fields)), WRITTEN, key).questions[0]
    assert q1.points == 4.5  # 7 of 8 fields (0.5 each) and the explanation
    assert f"unreadable: rank2.y ({value!r} is not a number or a list of numbers)" in q1.feedback


def test_wrong_fields_are_named_but_their_right_values_are_not_given_away(tmp_path, key):
    text = form("Q2", "after_rank1: 3\nafter_rank2: 5\nafter_rank3: 9\nrank0: 10\nrank1: 10\nrank2: 10\nrank3: 10")
    q2 = check_written(answers(tmp_path, text), WRITTEN, key).questions[1]
    assert q2.points == round(5 * 4 / 7 + 1, 2)
    assert "wrong: after_rank2, after_rank3" in q2.feedback
    assert "6" not in q2.feedback


@pytest.mark.parametrize(
    ("shape", "content", "points"),
    [
        ("[6]", "[0, 10, 1, 11, 2, 12]", 5),
        ("(6,)", "(0., 10., 1., 11., 2., 12.)", 5),
        ("torch.Size([6])", "tensor([0., 10., 1., 11., 2., 12.])", 5),
        ("6", "[0, 10, 1, 11, 2, 12]", 5),  # a one-element list may be written as its number
        ("[6]", "[0, 1, 2, 10, 11, 12]", 2),  # rank order matters: shape and explanation only
        ("[3, 2]", "[[0, 10], [1, 11], [2, 12]]", 1),  # nested lists are not the 1-D array asked for
    ],
)
def test_list_fields_are_compared_element_by_element(tmp_path, key, shape, content, points):
    fields = f"shape: {shape}\n" + "\n".join(f"rank{r}: {content}" for r in range(3))
    assert check_written(answers(tmp_path, form("Q3", fields)), WRITTEN, key).questions[2].points == points


def test_prose_alone_earns_nothing_however_right_it_is_and_waits_for_an_instructor(tmp_path, key):
    result = check_written(
        answers(tmp_path, "## Q1\nAll ranks print x = 20.0 and y = 20.0, in place.\n## Q2\n3, 6, 10; all print 10.\n"),
        WRITTEN,
        key,
    )
    assert result.pending
    assert "has no answer form" in result.message
    assert [q.points for q in result.questions] == [0, 0, 0]


def test_an_explanation_needs_a_few_words_and_comments_do_not_count(tmp_path, key):
    for explanation, provisional in [("Why: in place.", 0), ("<!-- a long comment of many words -->", 0), (WHY, 1)]:
        q1 = check_written(answers(tmp_path, form("Q1", Q1_RIGHT, explanation)), WRITTEN, key).questions[0]
        assert (q1.points, q1.provisional) == (4 + provisional, provisional), explanation


def test_a_question_without_its_form_scores_nothing_and_says_how_to_fix_it(tmp_path, key):
    marks = check_written(answers(tmp_path, form("Q1", Q1_RIGHT)), WRITTEN, key).questions
    assert marks[1].points == 0
    assert marks[1].feedback == "no answer form found under a '## Q2' heading (see the template)"


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


def test_a_section_runs_from_the_line_after_its_heading_to_the_next_heading():
    sections = answer_sections("intro\n## Q1. Broadcast values\none *two*\n### q2: title\n`three`\nQ1 again\n")
    assert sections == {"Q1": "\none *two*\n", "Q2": "\n`three`\n"}


# --------------------------------------------------------------------------- advice (reported, never scored)

A4 = Path(__file__).parent.parent / "rubrics" / "a4.yaml"
A4_LOG = (Path(__file__).parent.parent / "reference" / "a4" / "assignment4.log").read_text()


@pytest.fixture(scope="module")
def log_advice():
    rubric = load_rubric(A4)
    (advice,) = rubric.advice
    return rubric.deliverables[advice.deliverable].any_of, advice


def test_a_log_showing_every_comparison_is_confirmed(tmp_path, log_advice):
    candidates, advice = log_advice
    (tmp_path / "job-4711.log").write_text(A4_LOG)
    assert check_advice(tmp_path, candidates, advice.title, advice.expect) == f"{advice.title}: yes (job-4711.log)"


def test_a_log_lacking_a_comparison_names_what_no_line_shows(tmp_path, log_advice):
    candidates, advice = log_advice
    (tmp_path / "run.log").write_text(A4_LOG.replace("[DataParallel]", "[DP]"))
    said = check_advice(tmp_path, candidates, advice.title, advice.expect)
    assert said.startswith(f"{advice.title}: not shown in run.log (no line matches ")
    assert "DataParallel" in said and "FullColumnParallel" not in said


def test_a_missing_log_is_said_not_checked(tmp_path, log_advice):
    candidates, advice = log_advice
    assert check_advice(tmp_path, candidates, advice.title, advice.expect) == (
        f"{advice.title}: not checked, *.log not handed in"
    )


def test_advice_must_name_a_declared_deliverable_and_valid_regexes(tmp_path):
    text = A4.read_text().replace("  - deliverable: log\n", "  - deliverable: stdout\n")
    text = text.replace('"^(\\\\[\\\\])?', '"^(\\\\[\\\\]?')
    (tmp_path / "r.yaml").write_text(text)
    with pytest.raises(UserError) as exc:
        load_rubric(tmp_path / "r.yaml")
    assert "advice: deliverable 'stdout' is not declared" in str(exc.value)
    assert "bad regex" in str(exc.value)
