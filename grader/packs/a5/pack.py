"""Assignment 5 as the engine sees it: the :class:`~grader.pack.AssignmentPack` named ``a5``.

Session side only (the zygote imports ``grader.packs.a5.bodies`` and nothing of this module).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.pack import AssignmentPack, Case, CodePiece, bundled_rubric, bundled_starter, lazy
from grader.packs.a5 import catalog

if TYPE_CHECKING:
    from grader.handin.report import Report

HERE = Path(__file__).resolve().parent
REPORT = "report.md"


def _case_data(case: Case, root: Path) -> dict[str, Any]:
    """The program the case's ranks run: the report read and spliced here, in the session, so that the
    grader's answer to the question the case grades never reaches a rank (``splice.program``)."""
    from grader.packs.a5.splice import program

    path = root / REPORT
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    return program(text, catalog.question(case.kind))


def _read(path: Path) -> Report | None:
    """The report as A5 reads it (its questions' pasted text answers nothing), or None without one."""
    from grader.packs.a5.questions import read

    return read(path.read_text(encoding="utf-8", errors="replace")) if path.is_file() else None


def feedback(root: Path) -> list[str]:
    """Per code question, what the report holds and where the grader placed it, or why it could not.
    Reads and parses the report only (its code runs in the ranks, never here)."""
    from grader.packs.a5.splice import splice

    report = _read(root / REPORT)
    if report is None:
        return [f"{REPORT} is missing: no snippet was placed"]
    spliced = splice(report)
    notes = [f"{REPORT}: {problem}" for problem in report.problems]
    for question, placement in spliced.placements.items():
        status = "placed" if placement.placed else "NOT placed"
        notes.append(f"{question} {status}: {placement.message}")
    return notes


def review(root: Path) -> dict[str, str]:
    """Per code question answered in words only (prose under its heading, no code block a snippet could
    come from), the words, for an instructor to read: "the four conditions" stated in a sentence are
    an answer a person can mark, and scoring them 0 unread would not be.  Reads the report only."""
    from grader.packs.a5.snippets import NOT_PYTHON
    from grader.packs.a5.splice import CODE_QUESTIONS

    report = _read(root / REPORT)
    if report is None:
        return {}
    words: dict[str, str] = {}
    for question in CODE_QUESTIONS:
        answer = report.answer(question)
        if answer is None or not answer.prose.strip():
            continue
        if any(block.info.split(" ")[0].lower() not in NOT_PYTHON for block in answer.code):
            continue  # code was given: it is graded as code, right or wrong
        for kind in catalog.FUNCTION_OF:  # every kind that grades the question (Q8: forward and backward)
            if catalog.question(kind) == question:
                words[kind] = answer.prose.strip()
    return words


def words(path: Path, question: str) -> str:
    """The student's own words under ``question`` of the report at ``path`` (a manual item's answer):
    neither code, an answer form, a comment, nor the question's text pasted under its heading."""
    report = _read(path)
    answer = report.answer(question) if report is not None else None
    return answer.prose if answer is not None else ""


def _compared(root: Path) -> list[CodePiece]:
    """The report's snippets, every code block under every question: what the ranks run, spliced."""
    from grader.similarity.extract import report_snippets

    return report_snippets(root / REPORT)


PACK = AssignmentPack(
    id="a5",
    title="Assignment 5 — Pipeline Parallelism (all forward, all backward)",
    rubric=bundled_rubric("a5"),
    test_file=HERE / "test_a5.py",
    bodies="grader.packs.a5.bodies",
    cases=catalog.all_cases,
    prepare=lazy("grader.packs.a5.expected:prepare"),  # torch: imported by a grading only
    module_of={kind: "report" for kind in catalog.FUNCTION_OF},
    function_of=catalog.FUNCTION_OF,
    imports=False,  # a report is read, never imported: the bodies splice its snippets into the starter
    files={"report": (REPORT,)},
    judge=lazy("grader.packs.a5.judge:judge"),
    feedback=feedback,
    review=review,
    words=words,
    case_data=_case_data,
    compared=_compared,
    # the handout's report (its snippets) and the course's starter the snippets are spliced into
    starter=(bundled_starter("a5"), *sorted((HERE / "starter").glob("*.py"))),
)
