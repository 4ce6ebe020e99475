"""What the pages read: read-only queries over the service's tables (``grader.service.db``) and the
grade of record's files, and the one change a page makes to the queue (a regrade).

The class page answers from two indexed queries (each student's latest submission and latest graded
one, over ``ix_submissions_student``) and results documents read once per grading: a document is
cached by its submission id and the row's ``graded_at`` and score, which a regrade or a rescore
changes, so a page never shows a stale document and 1,000 students cost 1,000 reads once, not per
request.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row, and_, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from grader.gradebook import GRADED as BOOK_GRADED
from grader.gradebook import flags_for
from grader.render.changes import render_changes
from grader.results import GradeResult, Lateness
from grader.service.config import ServiceConfig
from grader.service.db import ERROR, GRADED, GRADING, QUEUED, SUPERSEDED, ManualScore, ScoredUnder, Submission
from grader.service.read import RESULTS
from grader.service.workers import submission_dir

PAGE_SIZE = 50
SORTS = ("student", "score", "received", "status")
RECENT_GRADES = 20  # gradings the queue's wait estimate is taken from


@dataclass(frozen=True)
class ClassRow:
    """One student on the class page: their latest submission, and their latest graded one's score."""

    student: str
    sid: str  # the latest submission (any state but superseded)
    status: str
    received_at: float
    submissions: int
    graded_sid: str | None = None
    score: float | None = None
    max_score: float | None = None
    late: bool = False
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Filters:
    """The class table's query string: what the server filters, sorts and pages by (no script needed)."""

    q: str = ""  # a substring of the student's name
    status: str = ""
    flag: str = ""
    late: str = ""  # "", "yes", "no"
    sort: str = "student"
    desc: bool = False
    page: int = 1

    @classmethod
    def parse(cls, params: dict[str, str]) -> Filters:
        sort = params.get("sort", "student")
        try:
            page = max(1, min(10**6, int(params.get("page", "1"))))
        except ValueError:
            page = 1
        return cls(
            q=params.get("q", "")[:100],
            status=params.get("status", "") if params.get("status", "") in (*_STATUSES, "") else "",
            flag=params.get("flag", "")[:40],
            late=params.get("late", "") if params.get("late") in ("yes", "no") else "",
            sort=sort if sort in SORTS else "student",
            desc=params.get("order") == "desc",
            page=page,
        )

    def query(self, **change: object) -> dict[str, str]:
        """The query string of these filters with ``change`` applied (links keep the other filters)."""
        values = {"q": self.q, "status": self.status, "flag": self.flag, "late": self.late, "sort": self.sort}
        values["order"] = "desc" if self.desc else ""
        values["page"] = str(self.page)
        values.update({k: str(v) for k, v in change.items()})
        return {k: v for k, v in values.items() if v and not (k == "page" and v == "1")}


_STATUSES = (QUEUED, GRADING, GRADED, ERROR, "no_submission")


@dataclass
class ClassView:
    rows: list[ClassRow]  # this page's
    total: int  # rows matching the filters
    pages: int
    flags: list[str]  # every flag in the class, for the filter's choices
    graded: dict[str, GradeResult] = field(default_factory=dict)  # every student's latest graded result
    graded_key: str = ""  # names those gradings: the shape is drawn again only when it changes


@dataclass(frozen=True)
class Graded:
    """A results document with what the class table shows of it, computed once per grading."""

    result: GradeResult
    flags: tuple[str, ...]
    late: bool


class ResultCache:
    """Results documents by (submission id, graded_at, score), the least recently used dropped first."""

    def __init__(self, config: ServiceConfig, size: int = 5000) -> None:
        self.config = config
        self.size = size
        self._docs: OrderedDict[tuple[str, float | None, float | None], Graded | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, assignment: str, sid: str, graded_at: float | None, score: float | None) -> Graded | None:
        key = (sid, graded_at, score)
        with self._lock:
            if key in self._docs:
                self._docs.move_to_end(key)
                return self._docs[key]
        try:
            result = GradeResult.load(submission_dir(self.config, assignment, sid) / RESULTS)
        except (OSError, ValueError, TypeError, KeyError):  # missing or damaged: the row says what it is
            graded = None
        else:
            flags = tuple(flags_for(BOOK_GRADED, result))
            graded = Graded(result, flags, result.lateness is Lateness.LATE)
        with self._lock:
            self._docs[key] = graded
            while len(self._docs) > self.size:
                self._docs.popitem(last=False)
        return graded


def class_view(
    sessions: sessionmaker[Session],
    cache: ResultCache,
    assignment: str,
    roster: Sequence[str],
    filters: Filters,
    also: Mapping[str, str] | None = None,
) -> ClassView:
    """The class table's rows for ``filters``, and every latest graded result (the class's shape);
    ``also``: a flag more for some students (the similarity check's), student -> flag."""
    with sessions.begin() as session:
        latest = _latest(session, assignment, None)
        graded = _latest(session, assignment, GRADED)
        counts = dict(
            session.execute(
                select(Submission.student, func.count())
                .where(Submission.assignment == assignment)
                .group_by(Submission.student)
            ).all()
        )
    results: dict[str, GradeResult] = {}
    keys: list[tuple[str, str, float | None, float | None]] = []
    rows: list[ClassRow] = []
    for student in sorted(set(roster) | set(latest)):
        last = latest.get(student)
        if last is None:
            rows.append(ClassRow(student, "", "no_submission", 0.0, 0))
            continue
        best = graded.get(student)
        doc = cache.get(assignment, best.id, best.graded_at, best.score) if best is not None else None
        flags: tuple[str, ...] = ()
        late = False
        if best is not None and doc is not None:
            results[student] = doc.result
            keys.append((student, best.id, best.graded_at, best.score))
            flags, late = doc.flags, doc.late
        if last.status == ERROR:
            flags = (*flags, "grader_error")
        if also and student in also:
            flags = (*flags, also[student])
        rows.append(
            ClassRow(
                student,
                last.id,
                last.status,
                last.received_at,
                int(counts.get(student, 0)),
                best.id if best else None,
                best.score if best else None,
                best.max_score if best else None,
                late,
                flags,
            )
        )
    every_flag = sorted({f for row in rows for f in row.flags})
    chosen = [row for row in rows if _matches(row, filters)]
    chosen.sort(key=_sort_key(filters.sort), reverse=filters.desc)
    pages = max(1, math.ceil(len(chosen) / PAGE_SIZE))
    page = min(filters.page, pages)
    shown = chosen[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    return ClassView(shown, len(chosen), pages, every_flag, results, hashlib.sha256(repr(keys).encode()).hexdigest())


def _latest(session: Session, assignment: str, status: str | None) -> dict[str, Row[Any]]:
    """Each student's latest submission of ``assignment`` (not superseded; of ``status`` when given):
    the columns the pages read, as rows (ORM objects for 1,000 students cost a third of the page)."""
    wanted = Submission.status == status if status else Submission.status != SUPERSEDED
    newest = (
        select(Submission.student, func.max(Submission.received_at).label("at"))
        .where(Submission.assignment == assignment, wanted)
        .group_by(Submission.student)
        .subquery()
    )
    rows = session.execute(
        select(*(getattr(Submission, c) for c in _COLUMNS)).join(
            newest,
            and_(
                Submission.student == newest.c.student,
                Submission.received_at == newest.c.at,
                Submission.assignment == assignment,
                wanted,
            ),
        )
    ).all()
    return {row.student: row for row in rows}


_COLUMNS = ("id", "student", "status", "received_at", "graded_at", "score", "max_score")


def _matches(row: ClassRow, filters: Filters) -> bool:
    return (
        (not filters.q or filters.q.casefold() in row.student.casefold())
        and (not filters.status or row.status == filters.status)
        and (not filters.flag or filters.flag in row.flags)
        and (not filters.late or row.late == (filters.late == "yes"))
    )


def _sort_key(sort: str) -> Callable[[ClassRow], Any]:
    if sort == "score":
        return lambda row: (row.score is not None, row.score or 0.0, row.student)
    if sort == "received":
        return lambda row: (row.received_at, row.student)
    if sort == "status":
        return lambda row: (row.status, row.student)
    return lambda row: row.student


# --- the queue -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worker:
    owner: str
    student: str
    assignment: str
    lease_until: float


@dataclass(frozen=True)
class QueueView:
    waiting: int  # this assignment's
    grading: int
    superseded: int
    waiting_all: int  # every assignment's: the workers are shared
    workers: int  # configured
    busy: list[Worker]
    typical_s: float | None  # the median receipt-to-grade time of the last gradings
    wait_s: float | None  # what a push now would wait, roughly


def queue_view(sessions: sessionmaker[Session], config: ServiceConfig, assignment: str) -> QueueView:
    """The queue's counts, what each busy worker grades, and a new push's expected wait: its place in
    line over the workers, times the typical receipt-to-grade time of the last gradings (the last
    received of those graded)."""
    with sessions.begin() as session:
        mine = dict(
            session.execute(
                select(Submission.status, func.count())
                .where(Submission.assignment == assignment, Submission.status.in_((QUEUED, GRADING, SUPERSEDED)))
                .group_by(Submission.status)
            ).all()
        )
        waiting_all = int(session.scalar(select(func.count()).where(Submission.status == QUEUED)) or 0)
        busy = [
            Worker(row.lease_owner or "", row.student, row.assignment, row.lease_until or 0.0)
            for row in session.execute(
                select(Submission.lease_owner, Submission.student, Submission.assignment, Submission.lease_until)
                .where(Submission.status == GRADING)
                .order_by(Submission.received_at)
            ).all()
        ]
        recent = session.execute(
            select(Submission.received_at, Submission.graded_at)
            .where(Submission.status == GRADED, Submission.graded_at.is_not(None))
            .order_by(Submission.received_at.desc())  # ix_submissions_queue's order: no sort of every grade
            .limit(RECENT_GRADES)
        ).all()
    typical = statistics.median(g - r for r, g in recent if g is not None) if recent else None
    workers = max(1, config.workers)
    wait = None if typical is None else typical * math.ceil((waiting_all + len(busy) + 1) / workers)
    return QueueView(
        int(mine.get(QUEUED, 0)),
        int(mine.get(GRADING, 0)),
        int(mine.get(SUPERSEDED, 0)),
        waiting_all,
        config.workers,
        busy,
        typical,
        wait,
    )


# --- a student's history ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Push:
    """One submission of a student's history, and what it changed against the graded one before it."""

    sid: str
    status: str
    received_at: float
    commit: str
    score: float | None
    max_score: float | None
    changes: str  # the --watch loop's change list; "" for the first grading or an ungraded push
    error: str | None


def history(sessions: sessionmaker[Session], cache: ResultCache, assignment: str, student: str) -> list[Push]:
    """Every submission of ``student`` for ``assignment``, oldest first, each graded one with the cases
    it fixed and broke against the graded one before it."""
    with sessions.begin() as session:
        rows = session.scalars(
            select(Submission)
            .where(Submission.assignment == assignment, Submission.student == student)
            .order_by(Submission.received_at)
        ).all()
        session.expunge_all()
    pushes: list[Push] = []
    before: GradeResult | None = None
    for row in rows:
        changes = ""
        if row.status == GRADED:
            doc = cache.get(assignment, row.id, row.graded_at, row.score)
            if doc is not None:
                if before is not None:
                    changes = render_changes(before, doc.result)
                before = doc.result
        pushes.append(
            Push(row.id, row.status, row.received_at, row.commit, row.score, row.max_score, changes, row.error)
        )
    return pushes


# --- the one change a page makes -------------------------------------------------------------------


def regrade(sessions: sessionmaker[Session], assignment: str, students: Sequence[str] | None) -> int:
    """Put each student's latest graded (or failed) submission back in the queue; ``None``: everyone's.

    A compare-and-set on the state the row was read in, as every change of ``grader.service.queue``:
    a row a worker holds, or a newer push, is left alone.  The workers grade it as any queued row (from
    the cache when the grading's key is unchanged).  The number of submissions queued."""
    with sessions.begin() as session:
        latest = _latest(session, assignment, None)
        ids = [
            row.id
            for student, row in latest.items()
            if row.status in (GRADED, ERROR) and (students is None or student in students)
        ]
        if not ids:
            return 0
        changed = session.execute(
            update(Submission)
            .where(Submission.id.in_(ids), Submission.status.in_((GRADED, ERROR)))
            .values(status=QUEUED, lease_owner=None, lease_until=None, attempts=0, error=None)
            .execution_options(synchronize_session=False)
        )
        return int(changed.rowcount)  # type: ignore[attr-defined]


def version(sessions: sessionmaker[Session], assignment: str) -> str:
    """Changes whenever a push, a claim, a grade, a regrade, a manual score or a rescore does: what the
    live page polls each second.

    Read from the indexes alone (the service's count per status over ``ix_submissions_queue``, the
    assignment's pushes over ``ix_submissions_student``, its manual scores and the scoring it was last
    written under by their primary keys), never the table: grouping the assignment's rows by status read
    all 20,000 of them per poll.  A manual score entered, changed or removed moves the count or the latest
    entry; a rescore from the rubric moves the scoring's digest."""
    with sessions.begin() as session:
        statuses = session.execute(
            select(Submission.status, func.count()).group_by(Submission.status).order_by(Submission.status)
        ).all()
        pushes, last = session.execute(
            select(func.count(), func.max(Submission.received_at)).where(Submission.assignment == assignment)
        ).one()
        manual, entered = session.execute(
            select(func.count(), func.max(ManualScore.entered_at)).where(ManualScore.assignment == assignment)
        ).one()
        scoring = session.scalar(select(ScoredUnder.digest).where(ScoredUnder.assignment == assignment))
    moved = ";".join(f"{status}:{n}" for status, n in statuses)
    return f"{moved};{pushes}:{last};{manual}:{entered};{scoring}"
