"""Tokens that are not GitHub's: a course's own submission tokens and the instructor's.

``grader service tokens --assignment ID --roster roster.csv`` gives each student of the roster one
random token for courses without Classroom, printed once as CSV (``student,token``) for the instructor
to hand out; the database keeps only each token's SHA-256, so a copy of it submits for nobody.  Issuing
again replaces a student's tokens for that assignment.

The instructor's token (``instructor_token_file``) opens the gradebook.  Both files the service
needs and may make (the instructor's token, the grade of record's secret) are made on first start,
0600, so a fresh clone starts with one command.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import hmac
import os
import secrets
import sys
import time
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from grader.errors import UserError
from grader.service.config import ServiceConfig, load_config, load_names
from grader.service.db import CourseToken, connect
from grader.service.refusal import Refused

TOKEN_PREFIX = "gst_"  # tells a course token from a JWT at a glance (and in a leaked log)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", errors="surrogateescape")).hexdigest()


def issue(sessions: sessionmaker[Session], assignment: str, students: tuple[str, ...]) -> dict[str, str]:
    """A new token for each of ``students`` (their older ones for ``assignment`` revoked)."""
    tokens = {student: TOKEN_PREFIX + secrets.token_urlsafe(32) for student in students}
    now = time.time()
    with sessions.begin() as session:
        session.execute(
            delete(CourseToken).where(CourseToken.assignment == assignment, CourseToken.student.in_(students))
        )
        session.add_all(
            CourseToken(digest=digest(t), assignment=assignment, student=s, created_at=now) for s, t in tokens.items()
        )
    return tokens


def student_of_token(session: Session, assignment: str, token: str) -> str:
    """The student a course token was issued to for ``assignment``; :class:`Refused` otherwise."""
    row = session.scalar(select(CourseToken).where(CourseToken.digest == digest(token)))
    if row is None:
        raise Refused(401, "bad_token", "the token is not one this service issued")
    if row.assignment != assignment:
        raise Refused(
            403, "wrong_assignment", f"the token was issued for assignment {row.assignment}, not {assignment}"
        )
    return row.student


def secret_file(path: Path, nbytes: int = 32) -> str:
    """The secret in ``path``, made (0600, random) when missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(nbytes) + "\n")
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    if not value:
        raise UserError(f"{path} is empty")
    return value


def check_instructor(expected: str, authorization: str | None) -> None:
    """Refuse a request whose ``Authorization`` is not ``Bearer <the instructor's token>``."""
    given = bearer(authorization)
    if not hmac.compare_digest(given.encode(errors="surrogateescape"), expected.encode()):
        raise Refused(403, "not_instructor", "this needs the instructor's token")


def bearer(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Refused(401, "no_token", "send the token as the header Authorization: Bearer <token>")
    return token.strip()


def main(args: argparse.Namespace) -> int:
    """``grader service tokens --config service.yaml --assignment ID --roster roster.csv``."""
    config: ServiceConfig = load_config(args.config)
    if args.assignment not in config.assignments:
        raise UserError(f"{args.config}: no assignment {args.assignment!r} (known: {', '.join(config.assignments)})")
    students = load_names(args.roster)
    if not students:
        raise UserError(f"{args.roster}: no students")
    from sqlalchemy.orm import sessionmaker as make_sessions

    tokens = issue(make_sessions(connect(config.database)), args.assignment, students)
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(["student", "token"])
    writer.writerows(tokens.items())
    print(
        f"{len(tokens)} tokens for {args.assignment}: only their hashes are kept; hand each out once", file=sys.stderr
    )
    return 0
