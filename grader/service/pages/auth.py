"""The instructor's session: ``POST /login`` with the instructor token starts one.

A session id is ``secrets.token_urlsafe(32)`` in an HttpOnly, SameSite=Strict cookie; the service
keeps only its SHA-256 (a memory dump or log line of the table opens nothing) with the session's CSRF
token, also from ``secrets``, which every form of the pages carries and every POST but the login's
must return.  Sessions live in the service process: a restart logs the instructor out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass

COOKIE = "grader_session"
LIFETIME_S = 12 * 3600


@dataclass(frozen=True)
class Session:
    csrf: str
    expires: float


class Sessions:
    def __init__(self, instructor_token: str) -> None:
        self._token = instructor_token
        self._by_digest: dict[str, Session] = {}
        self._lock = threading.Lock()

    def login(self, token: str) -> str | None:
        """A new session id when ``token`` is the instructor's; None otherwise."""
        if not token or not hmac.compare_digest(token.encode(), self._token.encode()):
            return None
        sid = secrets.token_urlsafe(32)
        now = time.time()
        with self._lock:
            self._by_digest = {k: v for k, v in self._by_digest.items() if v.expires > now}
            self._by_digest[_digest(sid)] = Session(secrets.token_urlsafe(32), now + LIFETIME_S)
        return sid

    def get(self, sid: str | None) -> Session | None:
        if not sid or len(sid) > 100:
            return None
        with self._lock:
            found = self._by_digest.get(_digest(sid))
        return found if found is not None and found.expires > time.time() else None

    def logout(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._by_digest.pop(_digest(sid), None)


def csrf_ok(session: Session, sent: str) -> bool:
    return bool(sent) and hmac.compare_digest(sent.encode(), session.csrf.encode())


def _digest(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()
