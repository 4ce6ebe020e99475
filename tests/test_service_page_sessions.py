"""The instructor's page sessions live in the service's database (grader.service.pages.auth), on SQLite and
on a real PostgreSQL: a session survives a restart on the same state, every service process on one
database honours it, a logout in one ends it in all, an expired one is refused and swept, and the table
holds no session id."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from grader.service.app import Service, create_app, open_service
from grader.service.config import load_config
from grader.service.db import PageSession
from grader.service.pages import auth
from tests import postgres
from tests.pages_kit import ASSIGNMENT, write_config

CLASS = f"/assignments/{ASSIGNMENT}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def config(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("page-sessions")
    if request.param == "sqlite":
        yield write_config(root)
        return
    why = postgres.unavailable()
    if why:
        pytest.skip(why)
    with postgres.cluster() as url:
        path = write_config(root)
        path.write_text(path.read_text() + f"database: {url}\n")
        yield path


class Process:
    """One service process over the config's state: its own engine, app and memory."""

    def __init__(self, config, cookie: str | None = None) -> None:
        self.service: Service = open_service(load_config(config))
        self.client = TestClient(create_app(self.service), follow_redirects=False)
        if cookie is not None:
            self.client.cookies.set(auth.COOKIE, cookie)

    def log_in(self) -> str:
        answer = self.client.post("/login", data={"token": self.service.instructor_token})
        assert answer.status_code == 303
        return answer.cookies[auth.COOKIE]

    def in_session(self) -> bool:
        answer = self.client.get(CLASS)
        assert answer.status_code in (200, 303), answer.status_code
        return answer.status_code == 200

    def csrf(self) -> str:
        found = re.search(r'name="csrf" value="([^"]+)"', self.client.get(CLASS).text)
        assert found is not None
        return found.group(1)

    def rows(self) -> list[PageSession]:
        with self.service.sessions.begin() as db:
            found = list(db.scalars(select(PageSession)))
            db.expunge_all()
            return found


def test_a_session_survives_a_restart_on_the_same_state(config):
    before = Process(config)
    cookie = before.log_in()
    csrf = before.csrf()
    after = Process(config, cookie)  # the service started again: nothing of the first one's memory
    assert after.in_session() and after.csrf() == csrf
    stored = after.rows()
    assert stored and not any(cookie in (row.digest, row.csrf) for row in stored)  # only its SHA-256


def test_a_logout_in_one_process_ends_the_session_in_every_one(config):
    first = Process(config)
    cookie = first.log_in()
    second = Process(config, cookie)
    assert first.in_session() and second.in_session()
    assert second.client.post("/logout", data={"csrf": "guess"}).status_code == 403  # its CSRF token still
    assert second.client.post("/logout", data={"csrf": second.csrf()}).status_code == 303
    assert not first.in_session() and not Process(config, cookie).in_session()


def test_an_expired_session_is_refused_and_swept(config):
    one = Process(config)
    cookie = one.log_in()
    with one.service.sessions.begin() as db:
        db.execute(update(PageSession).values(expires_at=PageSession.expires_at - auth.LIFETIME_S - 1))
    assert not one.in_session()
    assert not Process(config, cookie).in_session()
    one.log_in()  # a login sweeps the expired rows
    assert len(one.rows()) == 1
    one.client.cookies.set(auth.COOKIE, "x" * (auth.SID_CHARS + 1))
    assert not one.in_session()
