"""What an instructor changes besides the queue: manual scores, a rescore from the rubric file, and the
similarity report of the class's latest submissions.  Plain functions of the configuration and the
database, which the pages (``grader.service.pages.actions``) call.

Every change is a rescore of cached gradings (``grader.service.workers.score_grading``, the engine's
own), never a grade: the grading the matrix ran is what is scored, with the manual scores kept in
the database (``ManualScore``) and the rubric the service scores under now.
"""

from __future__ import annotations

import csv
import logging
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from grader.batch.roster import Student
from grader.batch.workers import GRADED_DIR
from grader.errors import UserError
from grader.manual import ManualScores, load_manual
from grader.manual_items import check_manual, scorable
from grader.results import GradeResult
from grader.rubric import Item
from grader.seal import broken
from grader.service.config import Assignment, ServiceConfig
from grader.service.db import GRADED, ManualScore, Submission
from grader.service.intake import repo_path
from grader.service.read import RESULTS
from grader.service.workers import (
    iso,
    manual_scores,
    reread,
    rescore_class,
    score_grading,
    scoring,
    scoring_now,
    submission_dir,
)
from grader.similarity.check import CSV_NAME

log = logging.getLogger("grader.service")

MANUAL_BYTES = 1 << 20  # an uploaded manual-scores file: a class's scores are a few kB


# --- manual scores ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManualItem:
    """One item a manual score may set, as the form shows it."""

    id: str
    title: str
    max_points: float
    score: float | None  # in the latest graded result: automatic or provisional, or the manual score
    status: str
    entered: float | None  # the instructor's score kept for it, if any
    comment: str


@dataclass(frozen=True)
class ManualForm:
    sid: str | None  # the latest graded submission, which the scores are applied to
    items: list[ManualItem]


def latest_graded(session: Session, assignment: str, student: str) -> Submission | None:
    """The student's latest graded submission: the one the gradebook counts."""
    return session.scalars(
        select(Submission)
        .where(Submission.assignment == assignment, Submission.student == student, Submission.status == GRADED)
        .order_by(Submission.received_at.desc())
        .limit(1)
    ).first()


def _items_of(assignment: Assignment, result: GradeResult) -> dict[str, Item]:
    """The items a manual score may set for this grading (``grader.manual_items.scorable``): the
    rubric's manual kinds, and the cases items its scoring left to an instructor (code in words)."""
    return scorable(assignment.rubric, {item.id for item in result.items() if item.manual})


def manual_form(
    sessions: sessionmaker[Session], config: ServiceConfig, assignment: Assignment, student: str
) -> ManualForm:
    """The manual items of the student's latest graded submission, with what each has now."""
    with sessions.begin() as session:
        row = latest_graded(session, assignment.id, student)
        entered = manual_scores(session, assignment.id, student)
    if row is None:
        return ManualForm(None, [])
    try:
        result = GradeResult.load(submission_dir(config, assignment.id, row.id) / RESULTS)
    except (OSError, ValueError, TypeError, KeyError):
        return ManualForm(row.id, [])
    shown = {item.id: item for item in result.items()}
    items = []
    for item_id, item in _items_of(assignment, result).items():
        now = shown.get(item_id)
        items.append(
            ManualItem(
                item_id,
                item.title,
                item.points,
                now.score if now else None,
                now.status.value if now else "",
                entered.scores.get(item_id),
                entered.comments.get(item_id, ""),
            )
        )
    return ManualForm(row.id, items)


@dataclass
class Change:
    """What one student's manual scores become: ``scores`` set (with their comments), ``removed`` dropped."""

    scores: ManualScores = field(default_factory=ManualScores)
    removed: set[str] = field(default_factory=set)


def enter_manual(
    config: ServiceConfig,
    sessions: sessionmaker[Session],
    key: bytes,
    assignment: Assignment,
    changes: Mapping[str, Change],
) -> dict[str, GradeResult]:
    """Apply ``changes`` to the students' manual scores and rescore each one's latest graded submission
    from its cached grading with them (as ``grader rescore --manual`` does; nobody is graded again).

    All or nothing: every student's scores are checked against the contract of ``grader.manual_items``
    (the items, their ranges) before anything is kept; a :class:`UserError` lists every problem.  A
    student without a graded submission has nothing to score yet.  Each student's new result."""
    now = time.time()
    with scoring(sessions, assignment.id) as session:
        under = scoring_now(config, session, assignment.id)
        if under is None:
            raise UserError(
                f"{assignment.rubric_file} changed since the class was last rescored: no manual score was "
                "changed; rescore from the rubric file first"
            )
        assignment = under
        problems: list[str] = []
        plan: list[tuple[Submission, ManualScores]] = []
        for student, change in sorted(changes.items()):
            row = latest_graded(session, assignment.id, student)
            if row is None:
                problems.append(f"{student}: no graded submission to score yet")
                continue
            merged = manual_scores(session, assignment.id, student)
            for item_id in change.removed:
                merged.scores.pop(item_id, None)
                merged.comments.pop(item_id, None)
            merged.scores.update(change.scores.scores)
            for item_id in change.scores.scores:
                merged.comments.pop(item_id, None)
            merged.comments.update(change.scores.comments)
            here = submission_dir(config, assignment.id, row.id)
            untrusted = broken(here, GRADED_DIR, key)
            if untrusted:
                problems.append(f"{student}: the cached grading is not to be trusted ({untrusted}): regrade it")
                continue
            try:
                result = GradeResult.load(here / RESULTS)
                check_manual(_items_of(assignment, result), merged)
            except UserError as exc:
                problems.append(f"{student}: {exc}")
                continue
            except (OSError, ValueError, TypeError, KeyError) as exc:
                problems.append(f"{student}: the latest grading cannot be read ({type(exc).__name__})")
                continue
            plan.append((row, merged))
        if problems:
            raise UserError("no manual score was changed:\n" + "\n".join(problems))
        results: dict[str, GradeResult] = {}
        for row, merged in plan:
            session.execute(
                delete(ManualScore).where(ManualScore.assignment == assignment.id, ManualScore.student == row.student)
            )
            session.add_all(
                ManualScore(
                    assignment=assignment.id,
                    student=row.student,
                    item=item_id,
                    points=points,
                    comment=merged.comments.get(item_id),
                    entered_at=now,
                )
                for item_id, points in merged.scores.items()
            )
            result = score_grading(config, key, assignment, row, merged)
            row.score, row.max_score = result.score, result.max_score
            results[row.student] = result
    return results


def parse_manual_upload(name: str, data: bytes) -> dict[str, ManualScores]:
    """An uploaded ``--manual`` file (CSV, or YAML by its name), read by the batch's own reader
    (``grader.manual.load_manual``), its errors naming the uploaded file."""
    if len(data) > MANUAL_BYTES:
        raise UserError(f"{name}: over the {MANUAL_BYTES >> 10} kB a manual-scores file may be")
    suffix = ".yaml" if name.lower().endswith((".yaml", ".yml")) else ".csv"
    shown = Path(name).name[:200] or f"manual{suffix}"
    with tempfile.TemporaryDirectory(prefix="grader-manual-") as tmp:
        path = Path(tmp) / f"upload{suffix}"
        path.write_bytes(data)
        try:
            return load_manual(path)
        except UserError as exc:
            raise UserError(str(exc).replace(str(path), shown)) from None


# --- a rescore from the rubric file ----------------------------------------------------------------


def rescore_from_rubric(config: ServiceConfig, sessions: sessionmaker[Session], key: bytes, assignment_id: str) -> str:
    """Read the assignment's rubric file (and ``service.yaml``'s deadline and late policy) again; when only
    the scoring moved, rescore every graded submission from its cache (``rescore_class``, as a start
    does) and score new ones under it.  A change of the matrix part is refused, nothing changed: that
    needs a regrade.  What was done, in a sentence."""
    old = config.assignments[assignment_id]
    fresh = reread(config, old)
    if fresh.scoring_digest == old.scoring_digest:
        return f"{fresh.rubric_file}: its scoring is unchanged; nothing to rescore"
    problems = _manual_misfits(config, sessions, fresh)
    if problems:
        raise UserError(
            f"{fresh.rubric_file}: manual scores the new rubric does not take: nothing was changed; change or "
            "clear them on the students' pages first:\n" + "\n".join(problems)
        )
    rescored = rescore_class(config, sessions, key, fresh)  # every service process scores under it from now
    return f"rescored {rescored} graded submissions from the cache under {fresh.rubric_file}; nobody was regraded"


def _manual_misfits(config: ServiceConfig, sessions: sessionmaker[Session], fresh: Assignment) -> list[str]:
    """Each kept manual score that ``fresh``'s rubric refuses (an item gone, points now above its
    maximum), by student: the contract of ``grader.manual_items``, as a manual score is entered."""
    problems = []
    with sessions.begin() as session:
        students = session.scalars(
            select(ManualScore.student).where(ManualScore.assignment == fresh.id).distinct()
        ).all()
        for student in sorted(students):
            row = latest_graded(session, fresh.id, student)
            if row is None:
                continue
            try:
                result = GradeResult.load(submission_dir(config, fresh.id, row.id) / RESULTS)
                check_manual(_items_of(fresh, result), manual_scores(session, fresh.id, student))
            except UserError as exc:
                problems.append(f"{student}: {exc}")
            except (OSError, ValueError, TypeError, KeyError):  # rescore_class says what is wrong with it
                continue
    return problems


# --- the similarity report -------------------------------------------------------------------------

SIMILARITY_DIR = "similarity"


@dataclass(frozen=True)
class SimilarityState:
    """An assignment's similarity check: ``idle``, ``running``, ``ready`` or ``failed``."""

    state: str = "idle"
    message: str = ""
    finished_at: float | None = None
    nearest: Mapping[str, tuple[str, float]] = field(default_factory=dict)  # student -> highest pair listed


def similarity_dir(config: ServiceConfig, assignment: str) -> Path:
    return config.state_dir / "assignments" / assignment / SIMILARITY_DIR


class SimilarityRuns:
    """Each assignment's latest similarity check, run in a thread of its own: one at a time each."""

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self._states: dict[str, SimilarityState] = {}
        self._lock = threading.Lock()

    def state(self, assignment: str) -> SimilarityState:
        with self._lock:
            if assignment not in self._states:
                self._states[assignment] = self._written(assignment)
            return self._states[assignment]

    def _written(self, assignment: str) -> SimilarityState:
        """The report an earlier start of the service wrote (its pairs flag the class again), if any."""
        path = similarity_dir(self.config, assignment) / CSV_NAME
        nearest: dict[str, tuple[str, float]] = {}
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                for row in csv.DictReader(fh):  # highest first: each student's first pair is their highest
                    pair, similarity = (row["student_a"], row["student_b"]), float(row["similarity"])
                    nearest.setdefault(pair[0], (pair[1], similarity))
                    nearest.setdefault(pair[1], (pair[0], similarity))
            finished = path.stat().st_mtime
        except FileNotFoundError:
            return SimilarityState()
        except (OSError, UnicodeDecodeError, csv.Error, KeyError, TypeError, ValueError) as exc:
            return SimilarityState("failed", f"{path}: the last report cannot be read ({exc}): run the check again")
        return SimilarityState("ready", "the report of an earlier run", finished, nearest)

    def start(self, sessions: sessionmaker[Session], assignment: Assignment) -> bool:
        """Start a check of ``assignment``; False when one is running already."""
        with self._lock:
            if self._states.get(assignment.id, SimilarityState()).state == "running":
                return False
            self._states[assignment.id] = SimilarityState("running")
        thread = threading.Thread(
            target=self._run, args=(self.config, sessions, assignment), name=f"similarity-{assignment.id}", daemon=True
        )
        thread.start()
        return True

    def _run(self, config: ServiceConfig, sessions: sessionmaker[Session], assignment: Assignment) -> None:
        try:
            done = run_similarity_check(config, sessions, assignment)
        except Exception as exc:  # a missing extra, a full disk: said on the page, the service stays up
            log.exception("similarity check of %s failed", assignment.id)
            done = SimilarityState("failed", str(exc) if isinstance(exc, UserError) else repr(exc), time.time())
        with self._lock:
            self._states[assignment.id] = done


def run_similarity_check(
    config: ServiceConfig, sessions: sessionmaker[Session], assignment: Assignment
) -> SimilarityState:
    """``grader similarity`` over each student's latest graded submission, their trees read from the
    service's bare repositories as ``grader grade`` takes them (only the rubric's files, no link followed,
    nothing run); the report written to ``state_dir/assignments/<id>/similarity/``."""
    from grader.pack import load_pack
    from grader.similarity.check import compare_class, write_report

    with sessions.begin() as session:
        rows = session.execute(
            select(Submission.student, Submission.id, Submission.received_at)
            .where(Submission.assignment == assignment.id, Submission.status == GRADED)
            .order_by(Submission.received_at)
        ).all()
    latest = {row.student: row for row in rows}  # the last received wins
    students = [
        Student(name, str(repo_path(config, assignment.id, row.id)), iso(row.received_at))
        for name, row in sorted(latest.items())
    ]
    pack = load_pack(assignment.rubric.assignment.pack)
    report = compare_class(students, pack, assignment.rubric)
    write_report(report, similarity_dir(config, assignment.id), f"{pack.title}: the latest graded submissions")
    nearest = {student: (near.other, near.similarity) for student, near in report.nearest().items()}
    listed = {s: n for s, n in nearest.items() if n[1] >= report.floor}
    message = f"{len(report.compared)} students compared, {len(report.listed)} pairs at or above {report.floor:.2f}"
    return SimilarityState("ready", message, time.time(), listed)
