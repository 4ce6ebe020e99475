"""The service's door: each bad token or body of issue 59 is refused with a clear 4xx JSON error,
nothing is stored (no row, no file, no used ``jti``), and the service stays up to take the next push.
Tokens come from a local OIDC issuer (``tests/oidc_issuer.py``); no grading runs here."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo
from fastapi.testclient import TestClient

from grader.service import intake, tokens
from grader.service.app import create_app, open_service
from grader.service.config import load_config
from grader.service.db import Submission
from grader.service.refusal import Refused
from tests import postgres
from tests.oidc_issuer import Issuer
from tests.service_kit import ROOT, bundle, commit_tree, git, write_config

LIMITS = """limits:
  body_bytes: 1048576
  tree_bytes: 2097152
  per_minute: 3
"""


class Door:
    def __init__(self, root: Path, database: str | None = None) -> None:
        self.root = root
        self.issuer = Issuer(root)
        (root / "roster.csv").write_text("student\nalice\nbob\ncarol\ndave\n")
        extra = LIMITS + (f"database: '{database}'\n" if database else "")
        config = write_config(root, self.issuer, extra=extra, assignment="    roster: roster.csv\n")
        self.config = load_config(config)
        self.service = open_service(self.config)
        self.client = TestClient(create_app(self.service))
        self.repo = root / "a5-alice"
        self.sha = commit_tree(self.repo, {"report.md": b"# My report\n"})
        self.bundle = bundle(self.repo)

    def post(self, body: bytes, token: str | None, assignment: str = "a5") -> tuple[int, dict]:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        response = self.client.post(f"/api/v1/assignments/{assignment}/submissions", content=body, headers=headers)
        return response.status_code, response.json()

    def token(self, student: str = "alice", **claims) -> str:
        return self.issuer.token(f"course-org/a5-{student}", claims.pop("sha", self.sha), **claims)

    def stored(self) -> tuple[int, list[str]]:
        """Rows, and files under the submissions' repositories and the incoming folder."""
        with self.service.sessions.begin() as session:
            rows = session.query(Submission).count()
        state = self.config.state_dir
        files = [str(p) for folder in (state / "incoming", state / "assignments") for p in folder.rglob("*")]
        return rows, files


@pytest.fixture(scope="module")
def door(tmp_path_factory) -> Iterator[Door]:
    door = Door(tmp_path_factory.mktemp("door"))
    with door.client:
        yield door


def _hostile_bundle(root: Path, name: bytes) -> tuple[bytes, str]:
    """A bundle whose commit's tree holds an entry named ``name``, which git itself would never write."""
    repo_dir = root / f"hostile-{name.hex()}"
    with Repo.init_bare(str(repo_dir), mkdir=True) as repo:
        blob = Blob.from_string(b"print('hi')\n")
        tree = Tree()
        tree.add(name, 0o100644, blob.id)
        commit = Commit()
        commit.tree, commit.message = tree.id, b"evil"
        commit.author = commit.committer = b"E <e@x>"
        commit.author_time = commit.commit_time = int(time.time())
        commit.author_timezone = commit.commit_timezone = 0
        for obj in (blob, tree, commit):
            repo.object_store.add_object(obj)
        repo.refs[b"refs/heads/main"] = commit.id
        repo.refs.set_symbolic_ref(b"HEAD", b"refs/heads/main")
    git(repo_dir, "bundle", "create", str(repo_dir) + ".bundle", "HEAD")
    return (repo_dir.parent / (repo_dir.name + ".bundle")).read_bytes(), commit.id.decode()


def _bomb(root: Path) -> tuple[bytes, str]:
    """8 MiB of zeros, about 8 KiB as a bundle: over the 2 MiB the door's tree may unpack to."""
    repo = root / "a5-bob"
    sha = commit_tree(repo, {"report.md": b"# x\n", "data.bin": bytes(8 << 20)})
    return bundle(repo), sha


def _unsigned(claims: dict) -> str:
    """A token with ``alg: none`` and no signature: what a forger sends to a verifier that trusts the header."""
    part = lambda data: base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def _refusals(door: Door) -> dict[str, tuple[bytes, str | None, str]]:
    """Each refusal: (body, token, assignment), by the error code it must get."""
    b, iss = door.bundle, door.issuer
    forger = Issuer.stranger_key()
    escape, escape_sha = _hostile_bundle(door.root, b"..")
    dotgit, dotgit_sha = _hostile_bundle(door.root, b".git")
    bomb, bomb_sha = _bomb(door.root)
    now = int(time.time())
    return {
        "no_token": (b, None, "a5"),
        "bad_signature": (b, iss.token("course-org/a5-alice", door.sha, key=forger), "a5"),
        "bad_token": (b, "gst_not-a-token-we-issued", "a5"),
        "bad_token:cannot be verified": (b, _unsigned(door.issuer.claims("course-org/a5-alice", door.sha)), "a5"),
        "expired_token": (b, door.token(exp=now - 600, iat=now - 900, nbf=now - 900), "a5"),
        "token_not_yet_valid": (b, door.token(nbf=now + 600), "a5"),
        "wrong_issuer": (b, door.token(iss="https://evil.example"), "a5"),
        "wrong_audience": (b, door.token(aud="https://another-service.example"), "a5"),
        "wrong_owner": (b, iss.token("someone-else/a5-alice", door.sha), "a5"),
        "wrong_repository": (b, iss.token("course-org/a9-alice", door.sha), "a5"),
        "not_on_roster": (b, door.token("eve"), "a5"),
        "unknown_assignment": (b, door.token(), "a99"),
        "wrong_commit": (b, door.token(sha="1" * 40), "a5"),
        "too_large": (b + bytes(1 << 20), door.token(), "a5"),
        "empty_body": (b"", door.token(), "a5"),
        "bad_bundle": (b"# v2 git bundle\n" + bytes(300), door.token(), "a5"),
        "bad_bundle:not a bundle": (b"PK\x03\x04 a zip, not a bundle", door.token(), "a5"),
        "bad_bundle:path escapes": (escape, door.token(sha=escape_sha), "a5"),
        "bad_bundle:.git": (dotgit, door.token(sha=dotgit_sha), "a5"),
        "bad_bundle:unpacks to over": (bomb, door.token("bob", sha=bomb_sha), "a5"),
    }


def test_every_bad_token_or_body_is_refused_with_a_clear_json_error_and_nothing_stored(door):
    for expected, (body, token, assignment) in _refusals(door).items():
        code, _, words = expected.partition(":")
        status, answer = door.post(body, token, assignment)
        assert 400 <= status < 500, (expected, status, answer)
        assert answer["error"]["code"] == code, (expected, answer)
        message = answer["error"]["message"]
        assert message and "\n" not in message and "Traceback" not in message, (expected, message)
        assert words in message, (expected, message)
        assert door.stored() == (0, []), expected
    assert door.client.get("/healthz").json() == {"ok": True}


def test_a_good_push_is_a_row_before_the_202_and_its_token_is_not_taken_twice(door):
    token = door.token("carol")
    status, answer = door.post(door.bundle, token)
    assert status == 202, answer
    assert (answer["status"], answer["student"], answer["commit"]) == ("queued", "carol", door.sha)
    assert len(answer["id"]) >= 22 and answer["url"] == f"/api/v1/submissions/{answer['id']}"
    assert answer["page"] == f"/s/{answer['id']}"
    assert door.stored()[0] >= 1
    shown = door.client.get(answer["url"]).json()
    assert (shown["status"], shown["results"], shown["error"]) == ("queued", None, None)
    assert shown["received_at"] == answer["received_at"] and shown["graded_at"] is None
    assert door.client.get(answer["url"] + "/report.html").json()["error"]["code"] == "not_graded"
    rows = door.stored()[0]
    status, replayed = door.post(door.bundle, token)
    assert (status, replayed["error"]["code"]) == (409, "replayed_token")
    assert door.stored()[0] == rows


def test_github_names_are_matched_as_github_matches_them_whatever_their_case(door):
    """GitHub's owner, repository and user names ignore case: ``Course-Org/A5-Carol`` is Classroom's
    ``a5-carol`` of the organisation ``course-org``, and the student is the roster's ``carol``, one row."""
    status, answer = door.post(door.bundle, door.issuer.token("Course-Org/A5-Carol", door.sha))
    assert status == 202, answer
    assert answer["student"] == "carol"
    status, answer = door.post(door.bundle, door.issuer.token("Course-Org/A5-Eve", door.sha))
    assert (status, answer["error"]["code"]) == (403, "not_on_roster")


def test_too_many_pushes_a_minute_from_one_repository_are_refused(door):
    codes = [door.post(door.bundle, door.token("dave"))[0] for _ in range(4)]
    assert codes == [202, 202, 202, 429]
    assert door.post(door.bundle, door.token("alice"))[0] == 202  # another repository is not slowed


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database(request) -> Iterator[str | None]:
    """The service's database: its default SQLite, or a real PostgreSQL (``tests/postgres.py``)."""
    if request.param == "sqlite":
        yield None
        return
    if why := postgres.unavailable():
        pytest.skip(why)
    with postgres.cluster() as url:
        yield url


def test_pushes_at_once_from_one_repository_take_exactly_the_minutes_places(database, tmp_path):
    """The limit is counted where the row is inserted, its repository held: eight pushes racing past
    the early count (each reads its bundle before its row is written) still give exactly three rows."""
    door = Door(tmp_path, database)
    pushes = [door.token("alice") for _ in range(8)]
    start = threading.Barrier(len(pushes))

    def push(token: str) -> int:
        start.wait()
        try:
            intake.receive(
                door.config, door.service.verifier, door.service.sessions, "a5", f"Bearer {token}", door.bundle
            )
        except Refused as refused:
            return refused.status
        return 202

    with ThreadPoolExecutor(len(pushes)) as pool:
        codes = sorted(pool.map(push, pushes))
    assert codes == [202] * 3 + [429] * 5
    assert door.stored()[0] == 3
    state = door.config.state_dir
    assert len(list((state / "assignments" / "a5" / "repos").iterdir())) == 3  # the refused left nothing
    assert not list((state / "incoming").iterdir())


def test_a_course_token_submits_for_its_student_and_only_its_hash_is_kept(door):
    issued = tokens.issue(door.service.sessions, "a5", ("bob",))
    status, answer = door.post(door.bundle, issued["bob"])
    assert status == 202 and answer["student"] == "bob" and answer["commit"] == door.sha


def test_each_push_is_one_log_line_saying_what_became_of_it_and_never_its_token(door, caplog):
    caplog.set_level(logging.INFO, logger="grader.service")
    good = door.token("bob")
    forged = door.issuer.token("course-org/a5-bob", door.sha, key=Issuer.stranger_key())
    status, answer = door.post(door.bundle, good)
    assert status == 202
    assert door.post(door.bundle, forged)[0] == 401
    lines = [record.getMessage() for record in caplog.records if record.name == "grader.service"]
    assert lines == [
        f"submission {answer['id']} received: a5/bob commit {door.sha}",
        "submission to 'a5' refused: 401 bad_signature",
    ]
    assert good not in caplog.text and forged not in caplog.text


def test_an_unknown_submission_is_a_json_404(door):
    for path in ("/api/v1/submissions/nope", "/api/v1/submissions/" + "x" * 500, "/nowhere"):
        response = door.client.get(path)
        assert response.status_code == 404 and response.json()["error"]["code"], path


def test_the_gradebook_needs_the_instructors_token(door):
    url = "/api/v1/assignments/a5/gradebook.csv"
    assert door.client.get(url).json()["error"]["code"] == "no_token"
    assert door.client.get(url, headers={"Authorization": "Bearer guess"}).json()["error"]["code"] == "not_instructor"
    book = door.client.get(url, headers={"Authorization": f"Bearer {door.service.instructor_token}"})
    assert book.status_code == 200 and book.headers["content-type"].startswith("text/csv")
    students = [line.split(",")[0] for line in book.text.splitlines()[1:]]
    assert students == ["alice", "bob", "carol", "dave"]  # the roster, each once


def test_a_configuration_error_names_its_line(tmp_path):
    from grader.errors import UserError

    issuer = Issuer(tmp_path)
    config = write_config(tmp_path, issuer, extra="workers: many\nlisten: nowhere\n")
    with pytest.raises(UserError) as refused:
        load_config(config)
    lines = str(refused.value).splitlines()
    assert any(line.startswith(f"{config}:8:") and "workers" in line for line in lines), lines
    assert any(line.startswith(f"{config}:9:") and "listen" in line for line in lines), lines


def test_grader_service_tokens_prints_each_students_token_once_and_keeps_only_hashes(tmp_path, capsys):
    from grader.cli import main

    config = write_config(tmp_path, Issuer(tmp_path))
    (tmp_path / "roster.csv").write_text("student,name\nalice,Alice A\nbob,Bob B\n")
    assert (
        main(
            [
                "service",
                "tokens",
                "--config",
                str(config),
                "--assignment",
                "a5",
                "--roster",
                str(tmp_path / "roster.csv"),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "student,token" and [line.split(",")[0] for line in lines[1:]] == ["alice", "bob"]
    given = {line.split(",")[0]: line.split(",")[1] for line in lines[1:]}
    service = open_service(load_config(config))
    with service.sessions.begin() as session:
        assert tokens.student_of_token(session, "a5", given["bob"]) == "bob"
    database = b"".join(p.read_bytes() for p in (tmp_path / "state").glob("service.sqlite3*"))  # the WAL too
    assert not any(token.encode() in database for token in given.values())


def test_the_documented_example_configuration_loads():
    config = load_config(ROOT / "docs" / "instructors" / "service.yaml")
    assert set(config.assignments) == {"a9", "a5"} and config.database.startswith("sqlite:///")
    assert config.state_dir == ROOT / "service-state"


def test_workers_grading_side_by_side_each_get_their_share_of_the_machine(tmp_path):
    """``workers: 3`` grade three submissions at once, whatever their assignment: each grade is told so
    (``grader.sandbox.shares``), as ``grader batch --jobs 3`` tells its grades, and its memory group is a
    third of the machine; told it was alone, each could take the whole machine and the out-of-memory
    killer could end a neighbour's grade."""
    from grader.service.workers import Engine

    issuer = Issuer(tmp_path)
    config = load_config(write_config(tmp_path, issuer, extra="workers: 3\n"))
    engine = Engine(config, open_service(config).sessions)
    assert [grader.jobs for grader in engine.graders.values()] == [3]


def test_a_grade_killed_under_its_worker_waits_again_charged_nothing_then_is_an_error(tmp_path, monkeypatch):
    """``kill -9`` of a worker's grade: the grade process dies by a signal (the batch's ``run`` answers
    its exit status, -9), the submission goes back to the queue; only a grade killed at every try
    (``MAX_ATTEMPTS``) becomes an error, with what its log says."""
    from grader.batch.workers import Outcome
    from grader.service import queue
    from grader.service.workers import MAX_ATTEMPTS, Engine

    door = Door(tmp_path)
    engine = Engine(door.config, door.service.sessions)
    killed = []

    def run(student, graded):  # the grade process, killed by SIGKILL before it wrote anything
        killed.append(student.name)
        (graded / "grade.log").write_text("Killed\n")
        return Outcome("graded", returncode=-9)

    monkeypatch.setattr(engine.graders["a5"], "run", run)
    with door.client:
        status, answer = door.post(door.bundle, door.token())
    assert status == 202
    for attempt in range(1, MAX_ATTEMPTS + 1):
        row = queue.claim(door.service.sessions, engine.owner, 60)
        assert row is not None and row.attempts == attempt
        engine.grade(row)
        shown = door.client.get(answer["url"]).json()
        assert shown["status"] == ("queued" if attempt < MAX_ATTEMPTS else "error"), attempt
    assert killed == [answer["id"]] * MAX_ATTEMPTS
    assert "Killed" in shown["error"] and shown["results"] is None
