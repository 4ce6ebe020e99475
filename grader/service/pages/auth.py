"""The instructor's session: ``POST /login`` with the instructor token starts one.

A session id is ``secrets.token_urlsafe(32)`` in an HttpOnly, SameSite=Strict cookie; the service
keeps only its SHA-256 (a dump or log line of the table opens nothing) with the session's CSRF token,
also from ``secrets``, which every form of the pages carries and every POST but the login's must
return.  Sessions are rows of the service's database (``page_sessions``): a restart keeps them, every
service process on one database shares them, and a logout in one ends the session in all.  Expired
rows are swept at each login.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from fastapi.responses import JSONResponse
from sqlalchemy import delete
from sqlalchemy.orm import Session as Db
from sqlalchemy.orm import sessionmaker

from grader.service.db import PageSession
from grader.service.refusal import error

COOKIE = "grader_session"
LIFETIME_S = 12 * 3600
SID_CHARS = 100  # a longer cookie is no id of ours: refused before it is hashed or looked up


@dataclass(frozen=True)
class Session:
    csrf: str
    expires: float


class Sessions:
    """The instructor's sessions in ``database`` (the service's sessionmaker)."""

    def __init__(self, instructor_token: str, database: sessionmaker[Db]) -> None:
        self._token = instructor_token
        self._database = database

    def login(self, token: str) -> str | None:
        """A new session id when ``token`` is the instructor's; None otherwise."""
        if not token or not hmac.compare_digest(token.encode(errors="surrogateescape"), self._token.encode()):
            return None
        sid = secrets.token_urlsafe(32)
        now = time.time()
        with self._database.begin() as db:
            db.execute(delete(PageSession).where(PageSession.expires_at <= now))
            db.add(PageSession(digest=_digest(sid), csrf=secrets.token_urlsafe(32), expires_at=now + LIFETIME_S))
        return sid

    def get(self, sid: str | None) -> Session | None:
        """The live session of the cookie ``sid``; None for none, an unknown one or an expired one."""
        if not sid or len(sid) > SID_CHARS:
            return None
        with self._database.begin() as db:
            found = db.get(PageSession, _digest(sid))
            if found is None or found.expires_at <= time.time():
                return None
            return Session(found.csrf, found.expires_at)

    def logout(self, sid: str | None) -> None:
        if sid and len(sid) <= SID_CHARS:
            with self._database.begin() as db:
                db.execute(delete(PageSession).where(PageSession.digest == _digest(sid)))


def no_session() -> JSONResponse:
    """An instructor's route asked without a session (a page's script, a POST): said, not redirected."""
    return error(401, "no_session", "log in first")


def bad_csrf() -> JSONResponse:
    return error(403, "bad_csrf", "the form's CSRF token is missing or wrong: reload the page")


def csrf_ok(session: Session, sent: str) -> bool:
    return bool(sent) and hmac.compare_digest(sent.encode(errors="surrogateescape"), session.csrf.encode())


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode(errors="surrogateescape")).hexdigest()
