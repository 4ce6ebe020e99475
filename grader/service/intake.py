"""Taking a submission: who is asking, what they hand in, and a row in the queue before the 202.

The checks run cheapest first, and a refusal stores nothing (no row, no file, no used ``jti``):

1. the assignment exists;
2. the token: GitHub's OIDC token (``grader.service.oidc``) or a course token (``grader.service.tokens``);
   the student it names is on the assignment's roster, when it has one;
3. the repository (or course token) has sent fewer than ``limits.per_minute`` in the last minute
   (counted again when the row is inserted, its rate key held: two pushes at once cannot both take
   the last place), and the OIDC token's ``jti`` was never used;
4. the body is a whole git bundle holding the token's commit, read as data by dulwich in a limited
   child process (``grader.gitread.unbundle``), within the size limits, no path in it escaping.

The trusted submission time is the moment the request was received.  The bundle becomes a bare
repository in ``state_dir``, which the grade reads as it reads any repository (``grader.intake``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from grader.errors import UserError
from grader.gitread import WrongTip, unbundle
from grader.service.config import Assignment, ServiceConfig
from grader.service.db import QUEUED, Submission
from grader.service.oidc import Verifier, looks_like_jwt, student_of
from grader.service.queue import accept, hold, recent
from grader.service.refusal import Refused
from grader.service.tokens import bearer, student_of_token

ID_BYTES = 24  # 192 random bits: a submission's id is the capability to read its grade


@dataclass(frozen=True)
class Asker:
    """Who a verified token says is submitting, and what."""

    student: str
    repository: str | None
    rate_key: str
    tip: str | None  # the commit the token names (OIDC); a course token names none
    jti: str | None


def repo_path(config: ServiceConfig, assignment: str, sid: str) -> Path:
    """Where an accepted submission's commit lives, as a bare repository."""
    return config.state_dir / "assignments" / assignment / "repos" / f"{sid}.git"


def identify(
    config: ServiceConfig,
    verifier: Verifier | None,
    session: Session,
    assignment: Assignment,
    authorization: str | None,
) -> Asker:
    token = bearer(authorization)
    if looks_like_jwt(token):
        if verifier is None:
            raise Refused(
                401, "oidc_not_configured", "this service takes no OIDC tokens (no oidc: in its configuration)"
            )
        claims = verifier.verify(token)
        student = student_of(claims, assignment.repo_prefix, assignment.id)
        asker = Asker(student, claims.repository, claims.repository, claims.sha, claims.jti)
    else:
        student = student_of_token(session, assignment.id, token)
        asker = Asker(student, None, f"token:{assignment.id}/{student}", None, None)
    if assignment.roster is None:
        return asker
    listed = {name.casefold(): name for name in assignment.roster}  # GitHub's usernames ignore case
    if asker.student.casefold() not in listed:
        raise Refused(403, "not_on_roster", f"{asker.student} is not on the roster of assignment {assignment.id}")
    return replace(asker, student=listed[asker.student.casefold()])  # one row per student, as listed


def receive(
    config: ServiceConfig,
    verifier: Verifier | None,
    sessions: sessionmaker[Session],
    assignment_id: str,
    authorization: str | None,
    body: bytes,
) -> Submission:
    """The accepted submission's row (queued, committed); :class:`Refused` with nothing stored."""
    received_at = time.time()
    assignment = config.assignments.get(assignment_id)
    if assignment is None:
        raise Refused(404, "unknown_assignment", f"there is no assignment {assignment_id!r} on this service")
    with sessions.begin() as session:
        asker = identify(config, verifier, session, assignment, authorization)
        if recent(session, asker.rate_key, received_at) >= config.per_minute:  # early, before the bundle is read
            raise _rate_limited(config)
        if asker.jti is not None and session.scalar(select(Submission.id).where(Submission.jti == asker.jti)):
            raise Refused(409, "replayed_token", "this token was used already: each run of the workflow submits once")
    if len(body) > config.body_bytes:
        raise Refused(413, "too_large", f"the bundle is over the {config.body_bytes >> 20} MiB limit")
    if not body:
        raise Refused(400, "empty_body", "the body is empty: send a git bundle of the commit")
    sid = secrets.token_urlsafe(ID_BYTES)
    final = repo_path(config, assignment.id, sid)
    incoming = config.state_dir / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bundle-", dir=incoming) as tmp:
        bundle = Path(tmp) / "submission.bundle"
        bundle.write_bytes(body)
        try:
            head = unbundle(bundle, Path(tmp) / "repo.git", asker.tip, config.tree_bytes)
        except WrongTip as exc:
            raise Refused(422, "wrong_commit", f"{exc}: bundle the commit the workflow runs on") from None
        except UserError as exc:
            raise Refused(422, "bad_bundle", str(exc)) from None
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(Path(tmp) / "repo.git", final)
    assert head.commit is not None
    row = Submission(
        id=sid,
        assignment=assignment.id,
        student=asker.student,
        repository=asker.repository,
        rate_key=asker.rate_key,
        commit=head.commit,
        jti=asker.jti,
        status=QUEUED,
        received_at=received_at,
        attempts=0,
    )
    try:
        with sessions.begin() as session:
            hold(session, asker.rate_key)
            accept(session, row)
            if recent(session, asker.rate_key, received_at) > config.per_minute:  # this row counted: see hold
                raise _rate_limited(config)
            session.expunge(row)
    except IntegrityError:  # the same token raced itself here: the other request won
        shutil.rmtree(final, ignore_errors=True)
        raise Refused(
            409, "replayed_token", "this token was used already: each run of the workflow submits once"
        ) from None
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    return row


def _rate_limited(config: ServiceConfig) -> Refused:
    return Refused(429, "rate_limited", f"over {config.per_minute} submissions a minute: wait and push again")
