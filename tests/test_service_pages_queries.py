"""The pages' queries (grader.service.pages.data) on SQLite and on a real PostgreSQL: each student's
latest row and latest grade, the filters, a history's change list, the queue's counts, the live
version and the regrade's compare-and-set."""

from __future__ import annotations

import random
import time

import pytest

pytest.importorskip("sqlalchemy")
from grader.service.app import open_service
from grader.service.config import load_config
from grader.service.db import GRADED, GRADING, QUEUED, SUPERSEDED, Submission
from grader.service.pages import data
from tests import postgres
from tests.pages_kit import ASSIGNMENT, Seeder, add_cases, fixture, variant, write_config


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def seeded(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("queries")
    if request.param == "sqlite":
        config = write_config(root, roster=["zoe"])
        yield from _seed(config)
        return
    why = postgres.unavailable()
    if why:
        pytest.skip(why)
    with postgres.cluster() as url:
        config = write_config(root, roster=["zoe"])
        config.write_text(config.read_text() + f"database: {url}\n")
        yield from _seed(config)


def _seed(config):
    service = open_service(load_config(config))
    seeder = Seeder(service, write_reports=False)
    base = add_cases(fixture(), 12)
    rng = random.Random(3)
    t = time.time() - 1000
    ids = {
        "amy": seeder.bulk(
            [
                ("amy", variant(base, rng, passing=0.2, student="amy"), t, GRADED, ""),
                ("amy", variant(base, rng, passing=1.0, student="amy"), t + 10, GRADED, ""),
                ("amy", None, t + 20, QUEUED, ""),
            ]
        ),
        "bob": seeder.bulk(
            [
                ("bob", variant(base, rng, passing=0.7, student="bob", late=True), t + 1, GRADED, ""),
                ("bob", None, t + 11, SUPERSEDED, ""),
                ("bob", None, t + 12, GRADING, ""),
            ]
        ),
    }
    yield service, ids


def view(service, **filters):
    cache = data.ResultCache(service.config)
    return data.class_view(service.sessions, cache, ASSIGNMENT, ("zoe",), data.Filters(**filters))


def test_each_student_has_their_latest_push_and_latest_grade(seeded):
    service, ids = seeded
    rows = {row.student: row for row in view(service).rows}
    assert set(rows) == {"amy", "bob", "zoe"}
    assert (rows["amy"].sid, rows["amy"].status, rows["amy"].graded_sid) == (ids["amy"][2], QUEUED, ids["amy"][1])
    assert rows["amy"].score == 100 and rows["amy"].submissions == 3
    assert (rows["bob"].sid, rows["bob"].status, rows["bob"].late) == (ids["bob"][2], GRADING, True)
    assert rows["zoe"].status == "no_submission" and rows["zoe"].score is None


def test_filters_and_sorts(seeded):
    service, _ = seeded
    assert [r.student for r in view(service, late="yes").rows] == ["bob"]
    assert [r.student for r in view(service, status=QUEUED).rows] == ["amy"]
    assert [r.student for r in view(service, q="Z").rows] == ["zoe"]
    assert [r.student for r in view(service, sort="score", desc=True).rows] == ["amy", "bob", "zoe"]


def test_a_history_lists_what_each_grade_fixed(seeded):
    service, ids = seeded
    pushes = data.history(service.sessions, data.ResultCache(service.config), ASSIGNMENT, "amy")
    assert [p.sid for p in pushes] == ids["amy"]
    assert pushes[0].changes == "" and pushes[2].changes == ""
    assert pushes[1].changes.startswith("Since the last grade:") and "now pass" in pushes[1].changes


def test_the_queue_counts_and_a_regrade_is_a_compare_and_set(seeded):
    service, ids = seeded
    queue = data.queue_view(service.sessions, service.config, ASSIGNMENT)
    assert (queue.waiting, queue.grading, queue.superseded) == (1, 1, 1)
    assert queue.typical_s == pytest.approx(30.0) and queue.wait_s is not None
    before = data.version(service.sessions, ASSIGNMENT)
    # amy's latest is queued and bob's is being graded: neither is touched
    assert data.regrade(service.sessions, ASSIGNMENT, None) == 0
    assert data.version(service.sessions, ASSIGNMENT) == before
    with service.sessions.begin() as session:
        session.get(Submission, ids["bob"][2]).status = GRADED
    before = data.version(service.sessions, ASSIGNMENT)
    assert data.regrade(service.sessions, ASSIGNMENT, ["bob"]) == 1
    with service.sessions.begin() as session:
        assert session.get(Submission, ids["bob"][2]).status == QUEUED
        assert session.get(Submission, ids["amy"][1]).status == GRADED
    assert data.version(service.sessions, ASSIGNMENT) != before
