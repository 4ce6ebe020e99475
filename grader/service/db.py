"""The service's database: SQLite in ``state_dir`` by default, PostgreSQL for a course that outgrows
one process.  The tables are these models; their schema is the Alembic migrations' (``migrations/``),
run on every start, never ``create_all``.

Times are UTC seconds since the epoch (a float): the same on both databases, compared and ordered in
SQL without any time-zone reading.  Only what the queue and the API need lives here; the gradings
themselves (results, deliverables, seal) are files in ``state_dir`` (``grader.service.workers``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, Float, Index, Integer, String, Text, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

QUEUED, GRADING, GRADED, SUPERSEDED, ERROR = "queued", "grading", "graded", "superseded", "error"
STATUSES = (QUEUED, GRADING, GRADED, SUPERSEDED, ERROR)


class Base(DeclarativeBase):
    pass


class Submission(Base):
    """One accepted push: a row before the service answers 202, then the queue's state of it."""

    __tablename__ = "submissions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # secrets.token_urlsafe: the capability
    assignment: Mapped[str] = mapped_column(String(64))
    student: Mapped[str] = mapped_column(String(64))
    repository: Mapped[str | None] = mapped_column(String(200))  # owner/name from the OIDC token
    rate_key: Mapped[str] = mapped_column(String(200))  # what the per-minute limit counts by
    commit: Mapped[str] = mapped_column(String(64))
    jti: Mapped[str | None] = mapped_column(String(200), unique=True)  # an OIDC token is used once
    status: Mapped[str] = mapped_column(String(16), default=QUEUED)
    received_at: Mapped[float] = mapped_column(Float)  # the trusted submission time
    graded_at: Mapped[float | None] = mapped_column(Float)
    score: Mapped[float | None] = mapped_column(Float)
    max_score: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(100))
    lease_until: Mapped[float | None] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (
        Index("ix_submissions_queue", "status", "received_at"),
        Index("ix_submissions_student", "assignment", "student", "received_at"),
        Index("ix_submissions_rate", "rate_key", "received_at"),
    )


class CourseToken(Base):
    """A course's own submission token (``grader service tokens``): only its SHA-256 is kept."""

    __tablename__ = "course_tokens"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    assignment: Mapped[str] = mapped_column(String(64))
    student: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)


class ManualScore(Base):
    """An instructor's score for one manual item of a student's (the ``--manual`` file's row), kept apart
    from the gradings: the student's latest grading is rescored with them, and deleting one restores
    the automatic score."""

    __tablename__ = "manual_scores"

    assignment: Mapped[str] = mapped_column(String(64), primary_key=True)
    student: Mapped[str] = mapped_column(String(64), primary_key=True)
    item: Mapped[str] = mapped_column(String(200), primary_key=True)
    points: Mapped[float] = mapped_column(Float)
    comment: Mapped[str | None] = mapped_column(Text)
    entered_at: Mapped[float] = mapped_column(Float)


class PageSession(Base):
    """An instructor's session on the pages (``grader.service.pages.auth``): the SHA-256 of its id (the
    cookie), never the id, so a copy of the table logs nobody in; in the database, so a restart keeps
    it and every service process on one database shares it."""

    __tablename__ = "page_sessions"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    csrf: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class ScoredUnder(Base):
    """The scoring an assignment's gradings were last written under (``Assignment.scoring_digest``): a
    start under another rescores them from the cache."""

    __tablename__ = "scored_under"

    assignment: Mapped[str] = mapped_column(String(64), primary_key=True)
    digest: Mapped[str] = mapped_column(String(80))


def connect(url: str) -> Engine:
    """An engine for ``url``, its schema migrated to the newest revision."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, pool_pre_ping=True)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    migrate(engine)
    return engine


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    """WAL lets the API read while a worker writes; a writer waits for the lock rather than failing;
    ``synchronous=FULL``: a 202 is on disk, a power cut included."""
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    for pragma in ("journal_mode=WAL", "busy_timeout=30000", "synchronous=FULL", "foreign_keys=ON"):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def migrate(engine: Engine) -> None:
    """Bring the database to the newest Alembic revision (the migrations ship inside the package)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).resolve().parent / "migrations"))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed at the end of the block, or rolled back on any exception."""
    with sessions.begin() as session:
        yield session
