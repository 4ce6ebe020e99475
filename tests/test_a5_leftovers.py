"""A5 read and graded as the handout says (issue 57, items 3 and 5).

- A question's own text pasted under its heading (``> **Q5:** Carefully examine...`` under ``## Q5``)
  is that question's text, never an answer nor a second one: "answered N times" is only for answers
  that each carry code or words of their own.
- Q2: accepting valid arguments is a condition of each condition's credit, never credit on its own.
- Q7: the explanation is an item of its own: no words score 0, "no answer found"; words wait for an
  instructor (``pending_review``), like Q1.  Neither the code, the answer form nor the pasted question
  is an explanation.
- Q8: a forward share (the last stage's outputs, taken by the grader at the trusted last layer, never
  from the student's list) and a backward share (the gradients).

The exact end-to-end scores are the fidelity corpus's (``a5_pasted_questions``, ``a5_q2_asserts_nothing``,
``a5_q7_no_explanation``, ``a5_q8_loss_on_every_stage``); here, the reader, the judge and the scoring
of the written items, with no grading run, and one grading that shows Q8's outputs are the grader's.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from xml.sax.saxutils import quoteattr

import pytest

from grader.deliverables import answer_sections
from grader.handin.report import read_report, repeats
from grader.manual import ManualScores
from grader.pack import Case, load_pack
from grader.packs.a5 import catalog
from grader.packs.a5.judge import judge
from grader.packs.a5.pack import words
from grader.packs.a5.questions import QUESTIONS, read
from grader.pipeline import grade
from grader.results import GradeResult, ItemStatus, SubmissionInfo, Verdict
from grader.rubric import load_rubric
from grader.scoring import score

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "reference" / "a5"
HANDOUT = ROOT.parent / "shared" / "course" / "a5" / "HANDOUT.md"
FOUR_IFS = (
    "```python\nif pp_is_first_stage: return None\nif pp_is_last_stage: return\n"
    "if pp_is_last_stage: return None\nif pp_is_first_stage: return\n```\n"
)
FORM = (
    "```answers\nrecv_forward: [1, 2, 3]\nsend_forward: [0, 1, 2]\n"
    "recv_backward: [0, 1, 2]\nsend_backward: [1, 2, 3]\n```\n"
)
NO_ANSWER = "no answer found under a '## Q7' heading"
EXPLAINED = "Every stage but the first receives its input from the previous one during the forward phase."


def pasted(question: str, quote: bool = True) -> str:
    text = f"**{question}:** {QUESTIONS[question]}"
    return "\n".join(("> " + line if line else ">") if quote else line for line in text.splitlines())


# --- item 3: a question's own text is not an answer ----------------------------------------------


def test_the_questions_are_the_handouts_own_words() -> None:
    if not HANDOUT.is_file():
        pytest.skip("the course's handout is not beside the checkout")
    handout = HANDOUT.read_text()
    assert sorted(QUESTIONS, key=lambda q: int(q[1:])) == [f"Q{n}" for n in range(1, 11)]
    assert all(f"**{q}:** {text}" in handout for q, text in QUESTIONS.items())


@pytest.mark.parametrize("quote", [True, False], ids=["blockquote", "label"])
def test_a_question_pasted_under_its_heading_is_its_text_and_not_a_second_answer(quote: bool) -> None:
    text = f"## Q5: distribute_layers\n\n{pasted('Q5', quote)}\n\n```python\nx = 1\n```\n\n"
    text += f"## Q1\n\n{pasted('Q1', quote)}\n\nDifferent seeds per stage, because each owns other layers.\n"
    report = read(text)
    assert report.problems == [] and report.duplicated == []
    q5, q1 = report.answer("Q5"), report.answer("Q1")
    assert q5 is not None and q1 is not None
    assert (q5.line, q5.title, [b.text for b in q5.code], q5.prose) == (1, "distribute_layers", ["x = 1\n"], "")
    assert q5.quoted.startswith("Carefully examine the `pipeline_parallel.py` file")
    assert q1.prose == "Different seeds per stage, because each owns other layers."  # the numbered list is Q1's text
    without_the_questions = read_report(text)  # a label alone still opens no second answer
    assert without_the_questions.duplicated == [] and without_the_questions.answer("Q5").code  # type: ignore[union-attr]


def test_a_part_of_the_question_is_its_text_and_an_answer_in_its_words_is_an_answer() -> None:
    assert repeats("Carefully examine...", QUESTIONS["Q5"])
    assert repeats("Which ranks require the training dataloader?", QUESTIONS["Q6"])
    assert not repeats("Only the first stage requires the training dataloader.", QUESTIONS["Q6"])
    assert not repeats("Yes", QUESTIONS["Q9"])
    report = read(f"## Q7\n\n**Q7:** {EXPLAINED}\n\n{FOUR_IFS}")  # the answer starts on the label's line
    assert report.answer("Q7").prose == EXPLAINED and report.duplicated == []  # type: ignore[union-attr]


def test_two_answers_each_with_code_or_words_of_their_own_are_still_answered_twice() -> None:
    twice = read(
        f"## Q5\n\n{pasted('Q5')}\n\n```python\na = 1\n```\n\n**Q5:** my second try\n\n```python\na = 2\n```\n"
    )
    assert twice.duplicated == ["Q5"] and twice.answer("Q5") is None
    assert "Q5 is answered 2 times" in twice.problems[0]
    once = read("## Q5\n\n```python\na = 1\n```\n\n## Q5\n\n## Q6\n")  # an empty second heading answers nothing
    assert once.duplicated == [] and once.answer("Q5").code  # type: ignore[union-attr]


def test_the_answer_forms_read_under_a_pasted_question() -> None:
    text = f"## Q7: pipeline_communicate\n\n{pasted('Q7')}\n\n{FORM}\n## Q8\n"
    assert "recv_forward: [1, 2, 3]" in answer_sections(text)["Q7"]
    assert "recv_forward" not in answer_sections(f"## Q7\n\nwords\n\n**Q7:** again\n\n{FORM}")["Q7"]  # first one wins


# --- item 5, Q2: accepting valid arguments is a condition, not credit -----------------------------


def _assertions(name: str) -> Case:
    return next(case for case in catalog.all_cases() if case.kind == "q2" and case.name == f"test_assertions[{name}]")


def _raised(case: Case, raises: set[str]) -> list[dict[str, object]]:
    """The one rank's reply: 1 for each argument set whose broken condition the assertions check."""
    import torch

    flags = []
    for pp, batch, micro, layers in case.params["args"]:
        broken = {"unbalanced"} if layers % pp else set()
        broken |= {"few-microbatches"} if batch // micro < pp else set()
        flags.append(int(bool(broken & raises) or "everything" in raises))
    return [{"raised": torch.tensor(flags)}]


def test_q2_has_no_case_of_valid_arguments_alone_and_each_condition_needs_them_accepted() -> None:
    names = sorted(case.name for case in catalog.all_cases() if case.kind == "q2")
    assert names == ["test_assertions[few-microbatches]", "test_assertions[unbalanced]"]
    for name in ("unbalanced", "few-microbatches"):
        case = _assertions(name)
        assert all(list(args) in case.params["args"] for args in catalog.BALANCED)
        assert judge(case, None, _raised(case, {name}), None) is None  # type: ignore[arg-type]
        nothing = judge(case, None, _raised(case, set()), None)  # type: ignore[arg-type]
        assert nothing is not None and "let" in nothing[1]
        always = judge(case, None, _raised(case, {"everything"}), None)  # type: ignore[arg-type]
        assert always is not None and "meet both conditions" in always[1]


# --- item 5, Q7: the explanation is an item of its own --------------------------------------------


def _every_case(path: Path, verdict: str) -> Path:
    rows = [
        f'<testcase classname="test_a5" name={quoteattr(case.name)}><properties>'
        f'<property name="verdict" value="{verdict}" /><property name="message" value="" />'
        "</properties></testcase>"
        for case in load_pack("a5").cases()
    ]
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(rows)}</testsuite></testsuites>')
    return path


def _scored(root: Path, report: str, manual: ManualScores | None = None, verdict: str = "pass") -> GradeResult:
    (root / "report.md").write_text(report)
    rubric = load_rubric(ROOT / "rubrics/a5.yaml")
    return score(
        rubric, _every_case(root / "junit.xml", verdict), SubmissionInfo("r", {}, "sha256:0"), [], root, manual
    )


@pytest.mark.parametrize(
    ("report", "status", "feedback"),
    [
        (f"## Q7\n\n{FORM}\n{FOUR_IFS}", ItemStatus.FAILED, "no answer found under a '## Q7' heading"),
        (
            f"## Q7\n\n{pasted('Q7')}\n\n{FORM}\n{FOUR_IFS}",
            ItemStatus.FAILED,
            "no answer found under a '## Q7' heading",
        ),
        (f"## Q7\n\n{pasted('Q7')}\n\n{EXPLAINED}\n\n{FORM}\n{FOUR_IFS}", ItemStatus.PENDING_REVIEW, "to be scored"),
        (f"## Q7\n\n{FORM}\n{EXPLAINED}\n\n{FOUR_IFS}", ItemStatus.PENDING_REVIEW, "to be scored"),
    ],
    ids=["code-and-form-only", "pasted-question-only", "pasted-then-explained", "explained-under-the-form"],
)
def test_q7s_explanation_is_marked_by_an_instructor_and_nothing_else_is_one(
    tmp_path: Path, report: str, status: ItemStatus, feedback: str
) -> None:
    result = _scored(tmp_path, report)
    explanation = result.item("q7_communicate.explanation")
    assert (explanation.score, explanation.max_score, explanation.status) == (0.0, 2.0, status)
    assert explanation.feedback.startswith(feedback)
    form = result.item("q7_communicate.written")
    assert (form.score, form.max_score, form.status) == (4.0, 4.0, ItemStatus.AUTO_CHECKED)  # the form alone: no wait
    assert result.item("q7_communicate.code").score == 12


def test_an_instructors_mark_for_q7s_explanation_counts(tmp_path: Path) -> None:
    result = _scored(tmp_path, f"## Q7\n\n{EXPLAINED}\n\n{FORM}", ManualScores({"q7_communicate.explanation": 2.0}, {}))
    assert (result.item("q7_communicate.explanation").score, result.score) == (
        2.0,
        84.0,
    )  # 100 less Q1's 10 and the Q3 and Q6 forms' 6
    assert words(tmp_path / "report.md", "Q7") == EXPLAINED


# --- item 5, Q8: the forward share is measured by the grader --------------------------------------


def test_q8s_shares_are_its_forward_and_its_backward_each_run_whole() -> None:
    rubric = load_rubric(ROOT / "rubrics/a5.yaml")
    q8 = rubric.item("q8_pipelined.code").scoring
    shares = {c.name: (c.share, c.match) for c in q8.components}  # type: ignore[union-attr]
    assert shares == {"forward": (0.5, ("test_pipelined_forward[*",)), "backward": (0.5, ("test_pipelined[*",))}
    cases = [case for case in catalog.all_cases() if case.kind in ("q8", "q8_forward")]
    assert sorted({case.kind for case in cases}) == ["q8", "q8_forward"]
    assert all(case.params.get("outputs") is False for case in cases if case.kind == "q8")  # outputs: forward's


def test_q8_answered_in_words_waits_for_an_instructor_whole(tmp_path: Path) -> None:
    """Both of Q8's kinds of case grade the one answer: words where its code was asked wait as before."""
    result = _scored(tmp_path, f"## Q8\n\n{pasted('Q8')}\n\n{EXPLAINED}\n", verdict="not_implemented")
    q8 = result.item("q8_pipelined.code")
    assert (q8.score, q8.status) == (0.0, ItemStatus.PENDING_REVIEW)
    assert (
        f"  > {EXPLAINED}" in q8.feedback and "Write the code" not in q8.feedback
    )  # the pasted question is not quoted


@pytest.mark.slow
def test_q8s_outputs_are_taken_at_the_trusted_layer_never_from_the_students_list(tmp_path: Path) -> None:
    """The student's ``output_tensors_pp`` holds zeros; the forward is right: the forward share is earned
    (the list is not what is graded), and so is the backward share (the gradients)."""
    submission = tmp_path / "report"
    shutil.copytree(REFERENCE, submission)
    text = (submission / "report.md").read_text()
    given = "    output_tensors_pp.append(output.detach().clone())\n"
    assert text.count(given) == 1
    (submission / "report.md").write_text(
        text.replace(given, "    output_tensors_pp.append(torch.zeros_like(output))\n")
    )
    result = grade(submission, load_pack("a5").rubric)
    q8 = {case.id: case.verdict for case in result.cases if case.id.startswith("test_pipelined")}
    assert len(q8) == 12 and set(q8.values()) == {Verdict.PASS}, q8
    assert result.item("q8_pipelined.code").score == 14
