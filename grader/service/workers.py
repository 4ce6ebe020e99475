"""The warm engine that works the queue: the batch's own graders, one submission at a time per worker.

Each assignment has a ``grader.batch.workers.Grader`` (or, with ``cluster:``, the batch's
``ClusterGrader``) over ``state_dir/assignments/<id>/submissions/``, one "student" per submission
id, its source the submission's bare repository and its submission time the receipt.  So a submission
is graded exactly as ``grader batch`` grades a student, by the same ``grader grade`` forked from the
same warm grade and host servers, with the grade of record's salt, sealed in the same cache; then
scored under the assignment's rubric, deadline and late policy (``grader.rescore``), and its files
written as the batch writes a student's (``grader.batch.write_student``).

``workers`` threads each claim a row (``grader.service.queue``), grade it and record the outcome; a
heartbeat thread renews their leases.  A grade already in the cache under the same key (the service
died after it finished, before the outcome was recorded) is not run again; a grade killed by a
signal under a worker is given back to the queue, charged nothing, up to :data:`MAX_ATTEMPTS`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from grader.batch import write_student
from grader.batch.roster import Student
from grader.batch.workers import GRADED_DIR, Grader, load_outcome, warm
from grader.errors import UserError
from grader.gradebook import GRADED as OUTCOME_GRADED
from grader.manual import ManualScores
from grader.pack import load_pack
from grader.rescore import rescore
from grader.results import GradeResult
from grader.seal import Untrusted, load_key, open_sealed
from grader.service import queue
from grader.service.config import Assignment, ServiceConfig, load_config
from grader.service.db import GRADED, QUEUED, ManualScore, ScoredUnder, Submission
from grader.service.intake import repo_path
from grader.service.leftovers import scratch
from grader.service.tokens import secret_file

log = logging.getLogger("grader.service")

MAX_ATTEMPTS = 3  # claims of one submission whose grade was killed under it before it is an error
IDLE_POLL_S = 0.5  # an idle worker looks at the queue again after this long


def submission_dir(config: ServiceConfig, assignment: str, sid: str) -> Path:
    """A submission's grading (``graded/``) and the grade of record's files: results.json, report.html."""
    return config.state_dir / "assignments" / assignment / "submissions" / sid


_scoring_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def scoring_lock(assignment: str) -> threading.Lock:
    """This process's threads' part of :func:`scoring`."""
    with _locks_lock:
        return _scoring_locks.setdefault(assignment, threading.Lock())


@contextlib.contextmanager
def scoring(sessions: sessionmaker[Session], assignment: str) -> Iterator[Session]:
    """A transaction in which gradings of ``assignment`` are scored and recorded (by a worker, a page's
    manual score or rescore), one holder at a time in every service process on the database: the
    thread lock, then the assignment's key in the database (``grader.service.queue.hold``).  So a
    rescore of the class never misses a grading another worker scored under the rubric it replaces.
    Use only ``session`` inside: on SQLite it holds the write lock."""
    with scoring_lock(assignment), sessions.begin() as session:
        queue.hold(session, f"scoring:{assignment}")
        yield session


def reread(config: ServiceConfig, held: Assignment) -> Assignment:
    """The assignment as ``config.file`` and its rubric file say now, refused (:class:`UserError`) where
    it is no longer listed or its matrix part changed: only a regrade answers that."""
    fresh = load_config(config.file).assignments.get(held.id)
    if fresh is None:
        raise UserError(f"{config.file} no longer lists assignment {held.id!r}: nothing was changed")
    if fresh.rubric.matrix_digest != held.rubric.matrix_digest or fresh.rubric_file != held.rubric_file:
        raise UserError(
            f"{fresh.rubric_file}: its pack, student files, deliverables, limits or policy changed, which "
            "decide the cases' verdicts: nothing was changed; restart the service and regrade everyone instead"
        )
    return fresh


def scoring_now(config: ServiceConfig, session: Session, assignment_id: str) -> Assignment | None:
    """The assignment under the scoring the class is recorded under (``ScoredUnder``), in
    :func:`scoring`'s ``session``: this process's, or, where another service process rescored the class
    from the rubric file since, the file's, adopted here.  None where the file is under neither (edited
    since, not rescored yet): no score can be recorded under the class's scoring by this process."""
    held = config.assignments[assignment_id]
    seen = session.get(ScoredUnder, assignment_id)
    if seen is None or seen.digest == held.scoring_digest:
        return held
    try:
        fresh = reread(config, held)
    except UserError:  # its matrix changed too: the class page's rescore says so
        return None
    if fresh.scoring_digest != seen.digest:
        return None
    config.assignments[assignment_id] = fresh
    log.info("%s: now scored under %s, as another service process rescored the class", held.id, fresh.rubric_file)
    return fresh


def manual_scores(session: Session, assignment: str, student: str) -> ManualScores:
    """The student's manual scores as the service keeps them (``grader.service.db.ManualScore``)."""
    manual = ManualScores()
    for entry in session.scalars(
        select(ManualScore).where(ManualScore.assignment == assignment, ManualScore.student == student)
    ):
        manual.scores[entry.item] = entry.points
        if entry.comment:
            manual.comments[entry.item] = entry.comment
    return manual


def score_grading(
    config: ServiceConfig, key: bytes, assignment: Assignment, row: Submission, manual: ManualScores
) -> GradeResult:
    """Score the cached grading of ``row`` under the assignment's scoring now and ``manual`` scores, and
    write the grade of record.

    The grading is read once through its seal into a private copy (``grader.seal.open_sealed``), as
    the batch reads a student's, and scored from that copy: a file of ``state_dir`` changed since the
    grade (:class:`Untrusted`) is never scored; nor is a manual score outside its item's contract
    (a :class:`UserError`, nothing written)."""
    here = submission_dir(config, row.assignment, row.id)
    diagram = load_pack(assignment.rubric.assignment.pack).diagram
    with tempfile.TemporaryDirectory(prefix="scoring-", dir=scratch(config)) as tmp:
        copy = Path(tmp)
        open_sealed(here, GRADED_DIR, key, copy)
        result = rescore(copy / GRADED_DIR, assignment.rubric, manual)
        write_student(result, here, row.student, diagram, copy / GRADED_DIR / "junit.xml")
    return result


def score_kept(
    config: ServiceConfig, key: bytes, assignment: Assignment, row: Submission, manual: ManualScores
) -> GradeResult:
    """:func:`score_grading` with the student's kept manual scores; where the grading no longer takes them
    (a newer push answered an item in code, not words), scored without them, said in the log: the
    automatic score, never no score.  A grading made under another matrix is still a :class:`UserError`."""
    try:
        return score_grading(config, key, assignment, row, manual)
    except UserError as exc:
        if not manual.scores:
            raise
        log.warning("%s: scored without %s's manual scores, which it does not take: %s", row.id, row.student, exc)
        return score_grading(config, key, assignment, row, ManualScores())


def rescore_class(config: ServiceConfig, sessions: sessionmaker[Session], key: bytes, assignment: Assignment) -> int:
    """Every graded submission of ``assignment`` scored again from its cached grading under its scoring
    now, and that scoring recorded (``ScoredUnder``): nobody is graded again.  A grading that cannot be
    rescored (made under another matrix, or its seal broken) goes back to the queue.  How many were
    rescored."""
    with scoring(sessions, assignment.id) as session:
        rows = session.scalars(
            select(Submission).where(Submission.assignment == assignment.id, Submission.status == GRADED)
        ).all()
        rescored = 0
        for row in rows:
            try:
                manual = manual_scores(session, row.assignment, row.student)
                result = score_kept(config, key, assignment, row, manual)
            except (UserError, Untrusted) as exc:  # graded again
                log.warning("%s: %s", row.id, exc)
                row.status, row.score, row.max_score = QUEUED, None, None
                continue
            row.score, row.max_score = result.score, result.max_score
            rescored += 1
        session.merge(ScoredUnder(assignment=assignment.id, digest=assignment.scoring_digest))
        config.assignments[assignment.id] = assignment  # a grading that lands from now is scored under it
    if rows:
        log.info("%s: %d gradings rescored from the cache", assignment.id, rescored)
    return rescored


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat().replace("+00:00", "Z")


class Engine:
    """``workers`` grading threads over the queue, and the heartbeat that keeps their claims theirs."""

    def __init__(self, config: ServiceConfig, sessions: sessionmaker[Session]) -> None:
        self.config = config
        self.sessions = sessions
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        salt = secret_file(config.secret_file)
        key = self.key = load_key(config.seal_key, config.state_dir / "assignments")
        command = [sys.executable, "-m", "grader", "grade"]
        self.graders: dict[str, Grader] = {}
        for assignment in config.assignments.values():
            students_dir = config.state_dir / "assignments" / assignment.id / "submissions"
            students_dir.mkdir(parents=True, exist_ok=True)
            self.graders[assignment.id] = Grader(
                students_dir,
                assignment.rubric,
                command,
                [],
                config.grade_timeout_s,
                False,
                rubric_file=assignment.rubric_file,
                salt=salt,
                seal_key=key,
            )
            # every assignment's grades share the workers: each grading's memory share is its part of the
            # machine, as grader batch --jobs gives it (grader.sandbox.shares)
            self.graders[assignment.id].jobs = config.workers
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._claimed: set[str] = set()
        self._lock = threading.Lock()
        self._client: contextlib.ExitStack | None = None
        self._warned: set[tuple[str, str]] = set()  # (assignment, scoring) that _unscorable has logged

    # --- life -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Rescore what a scoring change left stale, then grade until the block ends."""
        self.rescore_stale()
        with self._engine():
            threads = self.config.workers if self.config.cluster is None else max(self.config.workers, 8)
            self._threads = [
                threading.Thread(target=self._work, name=f"grade-{i}", daemon=True) for i in range(threads)
            ]
            self._threads.append(threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True))
            for thread in self._threads:
                thread.start()
            try:
                yield
            finally:
                self._stop.set()
                for grader in self.graders.values():
                    grader.stop()
                for thread in self._threads:
                    thread.join(timeout=30)

    @contextlib.contextmanager
    def _engine(self) -> Iterator[None]:
        """Warm grade and host servers shared by every assignment's grader (the batch's), or a Dask
        client and ``ClusterGrader``s in their place."""
        if self.config.cluster is not None:
            from grader.batch.cluster import ClusterGrader, connect, parse_cluster

            spec = parse_cluster(self.config.cluster)
            with connect(spec, None, self.config.workers, sys.stderr, True) as client:
                for aid, local in list(self.graders.items()):
                    self.graders[aid] = ClusterGrader(
                        local.students_dir, local.rubric, local.command, local.options, local.timeout, False,
                        rubric_file=local.rubric_file, salt=local.salt, seal_key=local.seal_key,
                        client=client, send=spec.kind == "scheduler", warm=True,
                        machine_jobs=spec.machine_jobs,
                    )  # fmt: skip
                yield
            return
        first, *others = self.graders.values()
        with warm(first, sys.platform.startswith("linux")):
            for grader in others:
                grader.hosts, grader.grades = first.hosts, first.grades
            yield

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.config.lease_s / 3):
            with self._lock:
                claimed = list(self._claimed)
            try:
                queue.heartbeat(self.sessions, self.owner, claimed, self.config.lease_s)
            except Exception:  # the database away a moment: the next beat tries again
                log.exception("heartbeat failed")

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                row = queue.claim(self.sessions, self.owner, self.config.lease_s)
            except Exception:
                log.exception("claim failed")
                row = None
            if row is None:
                self._stop.wait(IDLE_POLL_S)
                continue
            with self._lock:
                self._claimed.add(row.id)
            try:
                self.grade(row)
            except KeyboardInterrupt:  # stopping: the grade was ended, the submission waits again
                queue.release(self.sessions, row.id, self.owner)
                return
            except Exception as exc:
                log.exception("grading %s failed", row.id)
                if not self._stop.is_set():
                    queue.finish(self.sessions, row.id, self.owner, error=f"the service failed to grade it: {exc!r}")
            finally:
                with self._lock:
                    self._claimed.discard(row.id)

    # --- one submission ---------------------------------------------------------------------------

    def grade(self, row: Submission) -> None:
        """Grade ``row`` (claimed by this engine), score it, write its files, record the outcome."""
        assignment = self.config.assignments.get(row.assignment)
        if assignment is None:
            queue.finish(self.sessions, row.id, self.owner, error=f"assignment {row.assignment} is no longer served")
            return
        student = Student(row.id, str(repo_path(self.config, row.assignment, row.id)), iso(row.received_at))
        self.graders[row.assignment].process(student)
        if self._stop.is_set():
            raise KeyboardInterrupt
        outcome = load_outcome(submission_dir(self.config, row.assignment, row.id))
        if outcome.status != OUTCOME_GRADED:
            killed = outcome.returncode is not None and outcome.returncode < 0
            if killed and row.attempts < MAX_ATTEMPTS:
                log.warning("grade of %s killed (%s): back to the queue", row.id, outcome.returncode)
                queue.release(self.sessions, row.id, self.owner)
            else:
                queue.finish(self.sessions, row.id, self.owner, error=outcome.message or outcome.status)
            return
        with scoring(self.sessions, row.assignment) as session:  # a rescore may have replaced the rubric
            now = scoring_now(self.config, session, row.assignment)
            if now is not None:
                manual = manual_scores(session, row.assignment, row.student)
                result = score_kept(self.config, self.key, now, row, manual)
                queue.finish(session, row.id, self.owner, score=result.score, max_score=result.max_score)
        if now is None:  # another process scores it, or this one once the class is rescored
            self._unscorable(row)

    def _unscorable(self, row: Submission) -> None:
        """Give back a grading this process cannot score under the class's scoring (the rubric file was
        edited after another process's rescore, not rescored since): said once per such change; this
        worker waits a poll before it claims again, so that a process under the class's scoring can."""
        with self.sessions.begin() as session:
            seen = session.get(ScoredUnder, row.assignment)
        change = (row.assignment, seen.digest if seen else "")
        if change not in self._warned:
            self._warned.add(change)
            log.warning(
                "%s: %s left to the queue: the class is scored under a rubric another service process read, "
                "and %s has changed since; rescore from the rubric file on the class page to score it here",
                row.assignment, row.id, self.config.assignments[row.assignment].rubric_file,
            )  # fmt: skip
        queue.release(self.sessions, row.id, self.owner, killed=False)
        self._stop.wait(IDLE_POLL_S)

    def rescore_stale(self) -> None:
        """Every graded submission of an assignment whose rubric points, weights, deadline or late policy
        changed since its files were written is scored again from its cached grading (``rescore_class``,
        also a page's action): nobody is graded again.  A rubric whose matrix part changed cannot be
        rescored: those go back to the queue."""
        for assignment in self.config.assignments.values():
            with self.sessions.begin() as session:
                seen = session.get(ScoredUnder, assignment.id)
            if seen is None or seen.digest != assignment.scoring_digest:
                rescore_class(self.config, self.sessions, self.key, assignment)
