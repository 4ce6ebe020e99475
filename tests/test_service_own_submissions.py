"""A student lists their own submissions with their course token (``grader service tokens``): the API's
``GET /api/v1/assignments/{id}/submissions`` and the page ``/s`` (a POST of the token) answer that
student's submissions and nobody else's; a wrong or absent token is a 401 that reveals nothing; the
page keeps the token in no address or cookie and escapes the student's name."""

from __future__ import annotations

import random
import time

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from grader import cli, submit
from grader.service import tokens
from grader.service.app import create_app
from grader.service.db import QUEUED
from tests.pages_kit import ASSIGNMENT, add_cases, fixture, open_seeded, serving, variant

HOSTILE = '<script>window.__pwned=1</script>"><img src=x onerror=alert(1)>'
STUDENTS = ("ada", "grace", HOSTILE)
API = f"/api/v1/assignments/{ASSIGNMENT}/submissions"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    service, seeder = open_seeded(tmp_path_factory.mktemp("own"))
    seeder.write_reports = False
    base, rng, start = add_cases(fixture(), 6), random.Random(2), time.time() - 3600
    ids = {
        student: [
            seeder.add(student, variant(base, rng, passing=0.5, student=student), received=start + n * 60 + i)
            for i in range(2)
        ]
        for n, student in enumerate(STUDENTS)
    }
    ids["ada"].append(seeder.add("ada", None, received=start + 600, status=QUEUED))
    issued = tokens.issue(service.sessions, ASSIGNMENT, STUDENTS)
    return TestClient(create_app(service), follow_redirects=False), ids, issued, service


def listed(client: TestClient, token: str) -> dict:
    answer = client.get(API, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_token_lists_its_students_own_submissions_newest_first(course):
    client, ids, issued, _ = course
    mine = listed(client, issued["ada"])
    assert mine["student"] == "ada" and mine["assignment"] == ASSIGNMENT
    assert [s["id"] for s in mine["submissions"]] == ids["ada"][::-1]
    assert [s["status"] for s in mine["submissions"]] == ["queued", "graded", "graded"]
    newest, graded = mine["submissions"][0], mine["submissions"][1]
    assert newest["score"] is None and graded["score"] is not None and graded["max_score"] > 0
    assert graded["page"] == f"/s/{ids['ada'][1]}" and graded["received_at"].endswith("Z")


def test_another_students_token_sees_only_theirs(course):
    client, ids, issued, _ = course
    for student in ("grace", HOSTILE):
        answer = client.get(API, headers={"Authorization": f"Bearer {issued[student]}"})
        assert [s["id"] for s in answer.json()["submissions"]] == ids[student][::-1]
        others = [sid for who, mine in ids.items() if who != student for sid in mine]
        # her name as a value anywhere in the answer; not as text, which a random commit sha may hold ("...06ada5...")
        assert not any(sid in answer.text for sid in others) and '"ada"' not in answer.text


def test_a_wrong_or_absent_token_is_refused_and_reveals_nothing(course):
    client, ids, issued, _ = course
    everyone = [sid for mine in ids.values() for sid in mine]
    for headers in ({}, {"Authorization": "Bearer gst_wrong"}, {"Authorization": f"Basic {issued['ada']}"}):
        answer = client.get(API, headers=headers)
        assert answer.status_code == 401 and answer.json()["error"]["code"] in ("no_token", "bad_token")
        assert not any(sid in answer.text for sid in everyone) and "ada" not in answer.text
    unknown = client.get("/api/v1/assignments/nope/submissions", headers={"Authorization": f"Bearer {issued['ada']}"})
    assert unknown.status_code == 404


def test_the_page_lists_them_and_keeps_the_token_in_no_address_or_cookie(course):
    client, ids, issued, _ = course
    form = client.get("/s")
    assert form.status_code == 200 and 'action="/s"' in form.text and 'method="post"' in form.text
    page = client.post("/s", data={"assignment": ASSIGNMENT, "token": issued["ada"]})
    assert page.status_code == 200 and "set-cookie" not in page.headers
    assert page.headers["cache-control"] == "no-store" and issued["ada"] not in page.text
    assert all(f'href="/s/{sid}"' in page.text for sid in ids["ada"])
    assert not any(sid in page.text for who, mine in ids.items() if who != "ada" for sid in mine)
    wrong = client.post("/s", data={"assignment": ASSIGNMENT, "token": "gst_wrong"})
    assert wrong.status_code == 401 and "not one this service issued" in wrong.text
    assert not any(sid in wrong.text for mine in ids.values() for sid in mine)
    assert client.post("/s", data={"assignment": ASSIGNMENT}).status_code == 401


def test_the_page_escapes_the_students_name(course):
    client, ids, issued, _ = course
    page = client.post("/s", data={"assignment": ASSIGNMENT, "token": issued[HOSTILE]}).text
    assert "<script>window" not in page and "<img" not in page
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;&#34;&gt;&lt;img" in page
    assert all(f'href="/s/{sid}"' in page for sid in ids[HOSTILE])


def test_grader_submit_list_prints_the_students_own_pages(course, capsys, monkeypatch):
    _, ids, issued, service = course
    command = ["submit", "--list", "--assignment", ASSIGNMENT, "--server"]
    with serving(service) as url:
        monkeypatch.setenv(submit.TOKEN_ENV, issued["grace"])
        assert cli.main([*command, url]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[-1] for line in lines] == [f"{url}/s/{sid}" for sid in ids["grace"][::-1]]
        assert all(line.split()[1] == "graded" and "/" in line.split()[2] for line in lines)
        for token in ("", "gst_wrong"):
            monkeypatch.setenv(submit.TOKEN_ENV, token)
            assert cli.main([*command, url]) == 1
            answer = capsys.readouterr()
            assert "cannot list your submissions" in answer.err and answer.out == ""
