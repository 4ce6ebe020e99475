"""The service's durable queue and database, on SQLite and on a real PostgreSQL alike: accepting,
superseding, claiming by compare-and-set, leases that run out, heartbeats, exactly-once outcomes,
a ``jti`` used once and course tokens kept as hashes."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("sqlalchemy")

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from grader.service import queue, tokens
from grader.service.db import CourseToken, ScoredUnder, Submission, connect, migrate
from grader.service.refusal import Refused
from tests import postgres

_numbers = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database_server(request, tmp_path_factory) -> Iterator[str]:
    """Where each test's fresh database is made: a directory for SQLite, a running PostgreSQL's URL."""
    if request.param == "sqlite":
        yield str(tmp_path_factory.mktemp("sqlite"))
        return
    why = postgres.unavailable()
    if why:
        pytest.skip(why)
    with postgres.cluster() as url:
        yield url


@pytest.fixture
def sessions(database_server: str) -> Iterator[sessionmaker[Session]]:
    """A new, migrated database of the parametrized kind."""
    name = f"t{next(_numbers)}"
    if database_server.startswith("postgresql"):
        admin = create_engine(database_server, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {name}"))
        admin.dispose()
        url = database_server.replace("/postgres?", f"/{name}?")
    else:
        url = f"sqlite:///{database_server}/{name}.sqlite3"
    engine = connect(url)
    yield sessionmaker(engine, expire_on_commit=False)
    engine.dispose()


def row(sid: str, student: str = "alice", received_at: float | None = None, **fields) -> Submission:
    values = {
        "assignment": "a5",
        "student": student,
        "repository": f"org/a5-{student}",
        "rate_key": f"org/a5-{student}",
        "commit": "0" * 40,
        "status": queue.QUEUED,
        "received_at": time.time() if received_at is None else received_at,
        "attempts": 0,
    }
    return Submission(id=sid, **{**values, **fields})


def add(sessions: sessionmaker[Session], *rows: Submission) -> list[list[str]]:
    superseded = []
    for each in rows:
        with sessions.begin() as session:
            superseded.append(queue.accept(session, each))
    return superseded


def statuses(sessions: sessionmaker[Session]) -> dict[str, str]:
    with sessions.begin() as session:
        return {r.id: r.status for r in session.query(Submission)}


def test_the_migrations_make_every_table_and_a_second_run_changes_nothing(sessions):
    engine = sessions.kw["bind"]
    migrate(engine)
    tables = set(inspect(engine).get_table_names())
    assert {"submissions", "course_tokens", "scored_under", "alembic_version"} <= tables


def test_a_newer_push_supersedes_the_students_older_waiting_ones_and_nothing_else(sessions):
    add(sessions, row("a1", received_at=1), row("b1", "bob", received_at=2))
    claimed = queue.claim(sessions, "w", 60)  # a1, the oldest: now grading, no longer waiting
    assert claimed is not None and claimed.id == "a1"
    assert add(sessions, row("a2", received_at=3), row("a3", received_at=4)) == [[], ["a2"]]
    assert statuses(sessions) == {"a1": "grading", "b1": "queued", "a2": "superseded", "a3": "queued"}
    assert [queue.claim(sessions, "w", 60).id for _ in range(2)] == ["b1", "a3"]  # type: ignore[union-attr]
    assert queue.claim(sessions, "w", 60) is None  # a superseded row is never graded


def test_workers_claim_the_oldest_first_and_never_one_row_twice(sessions):
    add(sessions, *(row(f"s{i}", f"student{i}", received_at=i) for i in range(12)))
    claims: list[str] = []
    lock = threading.Lock()

    def worker(name: str) -> None:
        while (claimed := queue.claim(sessions, name, 60)) is not None:
            with lock:
                claims.append(claimed.id)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(claims) == sorted(f"s{i}" for i in range(12))
    assert set(statuses(sessions).values()) == {"grading"}


def test_a_claim_whose_lease_ran_out_is_taken_again_and_its_old_owner_records_nothing(sessions):
    add(sessions, row("a1"))
    assert queue.claim(sessions, "dead", 0.5) is not None
    time.sleep(0.6)  # its worker was killed: no heartbeat
    second = queue.claim(sessions, "alive", 60)
    assert second is not None and second.id == "a1" and second.attempts == 2
    assert not queue.finish(sessions, "a1", "dead", score=1, max_score=1)
    assert queue.finish(sessions, "a1", "alive", score=7, max_score=10)
    assert not queue.finish(sessions, "a1", "alive", score=8, max_score=10)  # once
    with sessions.begin() as session:
        done = session.get(Submission, "a1")
        assert (done.status, done.score, done.lease_owner) == ("graded", 7, None)


def test_a_heartbeat_keeps_a_claim_its_owners(sessions):
    add(sessions, row("a1"), row("b1", "bob"))
    assert queue.claim(sessions, "w", 0.5).id == "a1"  # type: ignore[union-attr]
    queue.heartbeat(sessions, "w", ["a1"], 60)  # w's claim renewed ...
    assert queue.claim(sessions, "v", 0.5).id == "b1"  # type: ignore[union-attr]
    queue.heartbeat(sessions, "thief", ["b1"], 60)  # ... v's left to run out: another's renews nothing
    time.sleep(0.6)
    taken = queue.claim(sessions, "thief", 60)
    assert taken is not None and taken.id == "b1"
    assert queue.claim(sessions, "thief", 60) is None


def test_a_released_claim_waits_again_and_a_finished_one_is_never_claimed(sessions):
    add(sessions, row("a1"), row("b1", "bob"))
    a = queue.claim(sessions, "w", 60)
    assert a is not None
    queue.release(sessions, a.id, "w")
    assert statuses(sessions)[a.id] == "queued"
    again = queue.claim(sessions, "w", 60)
    assert again is not None and again.id == a.id
    assert queue.finish(sessions, again.id, "w", error="broken")
    other = queue.claim(sessions, "w", 60)
    assert other is not None and other.id != a.id
    assert queue.claim(sessions, "w", 60) is None


def test_an_oidc_tokens_jti_is_accepted_once(sessions):
    add(sessions, row("a1", jti="run-1"))
    with pytest.raises(IntegrityError):
        add(sessions, row("a2", jti="run-1"))
    assert list(statuses(sessions)) == ["a1"]


def test_the_rate_counts_one_repositorys_last_minute(sessions):
    now = time.time()
    add(sessions, row("old", received_at=now - 120), row("a1", received_at=now - 5), row("b1", "bob", received_at=now))
    with sessions.begin() as session:
        assert queue.recent(session, "org/a5-alice", now) == 1


def test_a_held_rate_key_makes_the_count_after_an_insert_see_the_other_pushs_row(sessions):
    """``hold``: while one transaction holds a repository's key, another's insert and count wait for
    it, then count both rows; without the hold, each would count only its own and both pass the limit."""
    key, counted = "org/a5-alice", {}
    first = sessions()
    first.begin()
    queue.hold(first, key)
    queue.accept(first, row("first"))

    def second() -> None:
        with sessions.begin() as session:
            queue.hold(session, key)
            queue.accept(session, row("second"))
            counted["second"] = queue.recent(session, key, time.time())

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.5)  # the second push reaches its hold (PostgreSQL) or its insert (SQLite) and waits there
    counted["first"] = queue.recent(first, key, time.time())
    first.commit()
    first.close()
    thread.join(timeout=60)
    assert counted == {"first": 1, "second": 2}


def test_an_assignments_scoring_is_held_against_every_service_process(sessions):
    """``workers.scoring``: while one process scores the class (its threads' lock and the assignment's
    key held, as ``rescore_class``), another process's recording, which holds the key (its threads'
    lock is its own), waits for that commit and reads the scoring it recorded, never the one before."""
    from grader.service.workers import scoring

    seen = {}
    with sessions.begin() as session:
        session.add(ScoredUnder(assignment="a5", digest="old"))

    def other_process() -> None:
        with sessions.begin() as session:
            queue.hold(session, "scoring:a5")
            seen["digest"] = session.get(ScoredUnder, "a5").digest

    with scoring(sessions, "a5") as session:
        thread = threading.Thread(target=other_process)
        thread.start()
        time.sleep(0.5)  # the other reaches its hold and waits there
        session.get(ScoredUnder, "a5").digest = "new"
    thread.join(timeout=60)
    assert seen == {"digest": "new"}


def test_course_tokens_are_kept_as_hashes_and_name_their_student_and_assignment(sessions):
    issued = tokens.issue(sessions, "a5", ("alice", "bob"))
    with sessions.begin() as session:
        kept = {t.digest for t in session.query(CourseToken)}
        assert kept == {tokens.digest(t) for t in issued.values()}
        assert not kept & set(issued.values())
        assert tokens.student_of_token(session, "a5", issued["bob"]) == "bob"
        with pytest.raises(Refused) as wrong:
            tokens.student_of_token(session, "a9", issued["bob"])
        assert wrong.value.code == "wrong_assignment"
        with pytest.raises(Refused):
            tokens.student_of_token(session, "a5", "gst_not-one-of-ours")
    again = tokens.issue(sessions, "a5", ("alice",))  # issuing again revokes the old token
    with sessions.begin() as session, pytest.raises(Refused):
        tokens.student_of_token(session, "a5", issued["alice"])
    with sessions.begin() as session:
        assert tokens.student_of_token(session, "a5", again["alice"]) == "alice"
