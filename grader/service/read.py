"""What the service answers about submissions: a submission's status and results, its report, and the
instructor's gradebook.  Plain functions of the configuration and the database; the API
(``grader.service.app``) and any page over the same data call them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.gradebook import GRADED as BOOK_GRADED
from grader.gradebook import GRADER_ERROR, NO_SUBMISSION, GradebookRow, gradebook_row, render_gradebook, task_columns
from grader.results import GradeResult
from grader.service.config import ServiceConfig
from grader.service.db import ERROR, GRADED, SUPERSEDED, Submission
from grader.service.refusal import Refused
from grader.service.tokens import student_of_token
from grader.service.workers import iso, submission_dir

RESULTS, REPORT = "results.json", "report.html"


def submission_url(sid: str) -> str:
    return f"/api/v1/submissions/{sid}"


def page_url(sid: str) -> str:
    return f"/s/{sid}"


def find(sessions: sessionmaker[Session], sid: str) -> Submission:
    """The submission ``sid``; 404 when there is none (an id is 32 url-safe characters: longer ones are
    not looked up)."""
    if len(sid) > 64:
        raise Refused(404, "unknown_submission", "there is no such submission")
    with sessions.begin() as session:
        row = session.get(Submission, sid)
        if row is None:
            raise Refused(404, "unknown_submission", "there is no such submission")
        session.expunge(row)
        return row


def accepted(row: Submission) -> dict[str, Any]:
    """The 202 answer to a submission."""
    return {
        "id": row.id,
        "status": row.status,
        "received_at": iso(row.received_at),
        "student": row.student,
        "commit": row.commit,
        "url": submission_url(row.id),
        "page": page_url(row.id),
    }


def document(config: ServiceConfig, row: Submission) -> dict[str, Any]:
    """``GET /api/v1/submissions/{id}``: its state, and the canonical results document once graded."""
    results = None
    if row.status == GRADED:
        results = json.loads((submission_dir(config, row.assignment, row.id) / RESULTS).read_text(encoding="utf-8"))
    return {
        "id": row.id,
        "assignment": row.assignment,
        "student": row.student,
        "commit": row.commit,
        "status": row.status,
        "received_at": iso(row.received_at),
        "graded_at": iso(row.graded_at) if row.graded_at is not None else None,
        "results": results,
        "error": row.error,
    }


def own_submissions(
    config: ServiceConfig, sessions: sessionmaker[Session], assignment_id: str, token: str
) -> dict[str, Any]:
    """``GET /api/v1/assignments/{id}/submissions`` with a course token (``grader service tokens``): the
    token's student's submissions of that assignment, newest first, each with its capability address.
    The token alone decides whose: nothing in the request names a student."""
    if assignment_id not in config.assignments:
        raise Refused(404, "unknown_assignment", f"there is no assignment {assignment_id!r} on this service")
    with sessions.begin() as session:
        student = student_of_token(session, assignment_id, token)
        rows = session.execute(
            select(Submission.id, Submission.commit, Submission.status, Submission.received_at)
            .add_columns(Submission.graded_at, Submission.score, Submission.max_score)
            .where(Submission.assignment == assignment_id, Submission.student == student)
            .order_by(Submission.received_at.desc())
        ).all()
    return {
        "assignment": assignment_id,
        "student": student,
        "submissions": [
            {
                "id": row.id,
                "commit": row.commit,
                "status": row.status,
                "score": row.score,
                "max_score": row.max_score,
                "received_at": iso(row.received_at),
                "graded_at": iso(row.graded_at) if row.graded_at is not None else None,
                "url": submission_url(row.id),
                "page": page_url(row.id),
            }
            for row in rows
        ],
    }


def report(config: ServiceConfig, row: Submission) -> Path:
    """The student's HTML report of a graded submission; 404 before."""
    path = submission_dir(config, row.assignment, row.id) / REPORT
    if row.status != GRADED or not path.is_file():
        raise Refused(404, "not_graded", f"submission {row.id} is {row.status}: its report comes once it is graded")
    return path


def gradebook(config: ServiceConfig, sessions: sessionmaker[Session], assignment_id: str) -> str:
    """``GET /api/v1/assignments/{id}/gradebook.csv``: the batch's gradebook, one row per student on the
    roster or seen, each their latest graded submission (else their latest one's state)."""
    assignment = config.assignments.get(assignment_id)
    if assignment is None:
        raise Refused(404, "unknown_assignment", f"there is no assignment {assignment_id!r} on this service")
    with sessions.begin() as session:
        rows = session.scalars(
            select(Submission)
            .where(Submission.assignment == assignment_id, Submission.status != SUPERSEDED)
            .order_by(Submission.received_at)
        ).all()
        session.expunge_all()
    latest: dict[str, Submission] = {}
    graded: dict[str, Submission] = {}
    for row in rows:
        latest[row.student] = row
        if row.status == GRADED:
            graded[row.student] = row
    students = list(assignment.roster or ()) + sorted(set(latest) - set(assignment.roster or ()))
    book: list[GradebookRow] = []
    results: list[GradeResult | None] = []
    for student in students:
        if student in graded:
            row = graded[student]
            result = GradeResult.load(submission_dir(config, assignment_id, row.id) / RESULTS)
            pending = latest[student] is not row
            note = f"submission {row.id}" + (f"; a newer one is {latest[student].status}" if pending else "")
            book.append(gradebook_row(student, BOOK_GRADED, result, note))
            results.append(result)
        elif student in latest:
            row = latest[student]
            status = GRADER_ERROR if row.status == ERROR else row.status
            book.append(gradebook_row(student, status, None, row.error or f"submission {row.id}"))
        else:
            book.append(gradebook_row(student, NO_SUBMISSION, None, "nothing submitted"))
    return render_gradebook(book, task_columns(results))
