"""The durable queue: the ``submissions`` table, worked by compare-and-set updates.

Every change of a row's state is one ``UPDATE ... WHERE`` that names the state it expects, and whoever
sees one row changed owns the change; so the same code is correct on SQLite (one writer at a time) and
on PostgreSQL (many service processes over one database), with no lock held across a grade.

- **Accept**: the row is inserted, and the student's older rows still ``queued`` are marked
  ``superseded`` (kept, never graded), in one transaction, before the service answers 202; the
  per-minute limit is counted in that transaction, its rate key held (:func:`hold`), so two requests
  at once cannot both take the last place.
- **Claim**: the oldest ``queued`` row, or a ``grading`` row whose lease ran out (its worker died: a
  ``kill -9`` of the service, of a worker, of the machine), becomes this worker's for ``lease_s``.
- **Heartbeat**: a worker renews the leases of what it grades every third of ``lease_s``.
- **Finish**: only the lease's owner can record the outcome, once: a worker that lost its lease (it
  was presumed dead and the row was claimed again) records nothing.  So each accepted submission
  ends ``graded`` (or ``error``) exactly once, with the ``received_at`` of its first receipt.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable

from sqlalchemy import ColumnElement, func, or_, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from grader.service.db import ERROR, GRADED, GRADING, QUEUED, SUPERSEDED, Submission

log = logging.getLogger("grader.service")


def recent(session: Session, rate_key: str, now: float, window_s: float = 60.0) -> int:
    """Submissions accepted under ``rate_key`` in the last ``window_s`` seconds."""
    query = select(func.count()).where(Submission.rate_key == rate_key, Submission.received_at > now - window_s)
    return int(session.scalar(query) or 0)


def hold(session: Session, key: str) -> None:
    """Until ``session``'s transaction ends, no other transaction, in any service process, holds ``key``
    (a rate key: a count of its submissions then an insert are one step; an assignment's scoring).
    PostgreSQL: a transaction-scoped advisory lock on the key.  SQLite has one writer at a time: a
    write that changes nothing takes the database's write lock now, every key at once."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"), {"key": key})
    else:
        session.execute(text("UPDATE submissions SET id = id WHERE 0"))


def accept(session: Session, row: Submission) -> list[str]:
    """Insert ``row`` (status queued) and supersede the student's older rows still waiting; their ids."""
    older = session.scalars(
        select(Submission.id).where(
            Submission.assignment == row.assignment, Submission.student == row.student, Submission.status == QUEUED
        )
    ).all()
    if older:
        session.execute(
            update(Submission)
            .where(Submission.id.in_(older), Submission.status == QUEUED)
            .values(status=SUPERSEDED)
            .execution_options(synchronize_session=False)
        )
    session.add(row)
    session.flush()  # a replayed jti fails here, inside the caller's transaction
    return list(older)


def _claimable(now: float) -> ColumnElement[bool]:
    return or_(Submission.status == QUEUED, (Submission.status == GRADING) & (Submission.lease_until < now))


def claim(sessions: sessionmaker[Session], owner: str, lease_s: float, candidates: int = 8) -> Submission | None:
    """The oldest claimable row, now ``owner``'s (status grading, lease renewed); None when there is none."""
    now = time.time()
    with sessions.begin() as session:
        ids = session.scalars(
            select(Submission.id).where(_claimable(now)).order_by(Submission.received_at).limit(candidates)
        ).all()
    for sid in ids:
        with sessions.begin() as session:
            changed = session.execute(
                update(Submission)
                .where(Submission.id == sid, _claimable(now))
                .values(status=GRADING, lease_owner=owner, lease_until=now + lease_s, attempts=Submission.attempts + 1)
                .execution_options(synchronize_session=False)
            )
            if changed.rowcount == 1:  # type: ignore[attr-defined]
                row = session.get(Submission, sid)
                assert row is not None
                session.expunge(row)
                return row
    return None


def heartbeat(sessions: sessionmaker[Session], owner: str, ids: Iterable[str], lease_s: float) -> None:
    ids = list(ids)
    if not ids:
        return
    with sessions.begin() as session:
        session.execute(
            update(Submission)
            .where(Submission.id.in_(ids), Submission.lease_owner == owner, Submission.status == GRADING)
            .values(lease_until=time.time() + lease_s)
            .execution_options(synchronize_session=False)
        )


def finish(
    where: sessionmaker[Session] | Session,
    sid: str,
    owner: str,
    *,
    error: str | None = None,
    score: float | None = None,
    max_score: float | None = None,
) -> bool:
    """Record the outcome of ``owner``'s grade of ``sid`` (graded, or error with ``error``); False when
    the lease is no longer ``owner``'s, and nothing is recorded.  In a transaction of its own, or in
    ``where``'s when it is a session (a score recorded while its scoring is held)."""
    values = {"status": ERROR if error else GRADED, "error": error, "score": score, "max_score": max_score}
    with contextlib.nullcontext(where) if isinstance(where, Session) else where.begin() as session:
        changed = session.execute(
            update(Submission)
            .where(Submission.id == sid, Submission.lease_owner == owner, Submission.status == GRADING)
            .values(**values, graded_at=time.time(), lease_owner=None, lease_until=None)
            .execution_options(synchronize_session=False)
        )
    recorded = bool(changed.rowcount == 1)  # type: ignore[attr-defined]
    if recorded and error:
        log.info("submission %s graded: error: %.200r", sid, (error.strip().splitlines() or [""])[-1])
    elif recorded:
        log.info("submission %s graded: %s/%s", sid, score, max_score)
    return recorded


def release(sessions: sessionmaker[Session], sid: str, owner: str, *, killed: bool = True) -> None:
    """Give a claim back to the queue: graded again, charged nothing.  A claim whose grade was not killed
    under it (``killed=False``: this process could not score it) gives its attempt back too, so only
    killed grades count towards the worker's limit on them."""
    attempts = Submission.attempts if killed else Submission.attempts - 1
    with sessions.begin() as session:
        session.execute(
            update(Submission)
            .where(Submission.id == sid, Submission.lease_owner == owner, Submission.status == GRADING)
            .values(status=QUEUED, lease_owner=None, lease_until=None, attempts=attempts)
            .execution_options(synchronize_session=False)
        )


def rescore_scores(sessions: sessionmaker[Session], scores: dict[str, tuple[float, float]]) -> None:
    """New totals of graded rows after a rescore from the cache."""
    with sessions.begin() as session:
        for sid, (score, max_score) in scores.items():
            session.execute(
                update(Submission)
                .where(Submission.id == sid, Submission.status == GRADED)
                .values(score=score, max_score=max_score)
                .execution_options(synchronize_session=False)
            )
