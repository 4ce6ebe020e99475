"""The service's pages over a seeded database, for tests/test_service_pages.py and scripts/bench-pages.py.

``seed`` writes submissions the way the engine leaves them (a row, and ``results.json`` and the student
report in the submission's folder) from real results documents (tests/fixtures/results/graded.json with
its case verdicts and scores varied), without running a grading.  ``serving`` runs the real app
(``grader.service.app.create_app``, no engine: nothing grades, so a regrade stays queued) under uvicorn
on 127.0.0.1 in a thread; ``chromium`` is Debian's browser under Debian's chromedriver, headless.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.render.student_report import render_student_report
from grader.results import GradeResult
from grader.service.app import Service, create_app, open_service
from grader.service.config import load_config
from grader.service.db import GRADED, Submission
from grader.service.workers import submission_dir

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "results" / "graded.json"
ASSIGNMENT = "a9"


def write_config(root: Path, *, workers: int = 2, roster: list[str] | None = None) -> Path:
    config = root / "service.yaml"
    lines = [
        "listen: 127.0.0.1:0",
        f"state_dir: {root / 'state'}",
        f"workers: {workers}",
        "assignments:",
        f"  - id: {ASSIGNMENT}",
        "    pack: a9",
        "    repo_prefix: a9-",
    ]
    if roster is not None:
        (root / "roster.csv").write_text("student\n" + "".join(f"{name}\n" for name in roster))
        lines.append(f"    roster: {root / 'roster.csv'}")
    config.write_text("\n".join(lines) + "\n")
    return config


def variant(
    base: dict, rng: random.Random, *, passing: float, student: str, late: bool = False, files: dict | None = None
) -> dict:
    """The fixture's document with each case passing with probability ``passing``, the scores scaled to
    match, late or on time, its findings kept only with a low score: a results document as the engine
    writes one, for a seeded class."""
    doc = copy.deepcopy(base)
    if not late:
        doc["late"], doc["lateness"] = None, "on_time"
    if passing >= 0.5:
        doc["findings"] = []
        for task in doc["tasks"]:
            for item in task["items"]:
                item["findings"] = []
    for case in doc["cases"]:
        if rng.random() < passing:
            case["verdict"], case["message"] = "pass", ""
        elif case["verdict"] == "pass":
            case["verdict"], case["message"] = "wrong", f"rank 1: wrong values for {student}"
    for task in doc["tasks"]:
        task["score"] = round(task["max_score"] * passing, 1)
        for item in task["items"]:
            item["score"] = round(item["max_score"] * passing, 1)
    penalty = doc["late"]["points"] if doc["late"] else 0.0
    doc["score"] = max(0.0, round(sum(t["score"] for t in doc["tasks"] if not t.get("bonus")) - penalty, 2))
    if files is not None:
        doc["submission"]["files"] = files
    return doc


def add_cases(base: dict, n: int) -> dict:
    """The fixture with ``n`` cases of the matrix's kind (the fixture lists two): a class's pass rates per
    case need a matrix's worth."""
    doc = copy.deepcopy(base)
    ops = ("broadcast", "allreduce", "allgather", "reduce_scatter", "alltoall")
    doc["cases"] = [
        {"id": f"test_{ops[i % 5]}[ws{2 + i % 4}-case{i}]", "verdict": "pass", "message": ""} for i in range(n)
    ]
    return doc


@dataclass
class Seeder:
    service: Service
    write_reports: bool = True

    def add(self, student: str, doc: dict | None, *, received: float, status: str = GRADED, commit: str = "") -> str:
        """One submission of ``student``: graded with ``doc`` (written as the engine writes it), or a row
        in ``status`` with no files yet.  Its id."""
        return self.bulk([(student, doc, received, status, commit)])[0]

    def bulk(self, pushes: list[tuple[str, dict | None, float, str, str]]) -> list[str]:
        """Many submissions, (student, doc, received, status, commit) each, in one transaction; their ids."""
        config = self.service.config
        rows, ids = [], []
        for student, doc, received, status, commit in pushes:
            sid = secrets.token_urlsafe(24)
            row = Submission(
                id=sid,
                assignment=ASSIGNMENT,
                student=student,
                repository=f"course-org/a9-{student}"[:200],
                rate_key=f"seed:{student}"[:200],
                commit=commit or secrets.token_hex(20),
                jti=None,
                status=status,
                received_at=received,
                attempts=0,
            )
            if doc is not None:
                here = submission_dir(config, ASSIGNMENT, sid)
                here.mkdir(parents=True, exist_ok=True)
                (here / "results.json").write_text(json.dumps(doc), encoding="utf-8")
                if self.write_reports:
                    report = render_student_report(GradeResult.from_dict(doc), student=student)
                    (here / "report.html").write_text(report, encoding="utf-8")
                row.score, row.max_score, row.graded_at = doc["score"], doc["max_score"], received + 30.0
            rows.append(row)
            ids.append(sid)
        with self.service.sessions.begin() as session:
            session.add_all(rows)
        return ids


def fixture() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


def open_seeded(root: Path, *, roster: list[str] | None = None) -> tuple[Service, Seeder]:
    service = open_service(load_config(write_config(root, roster=roster)))
    return service, Seeder(service)


@contextlib.contextmanager
def serving(service: Service) -> Iterator[str]:
    """The service's app (no engine) under uvicorn on a free port of 127.0.0.1; its base URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the pages' server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def chromium(tmp: Path) -> Any:
    """Debian's Chromium, headless, driven by Debian's chromedriver (Selenium), its console logged; None
    when chromedriver is not installed (scripts/install-chromium.sh installs both).  Its temporary
    directory is ``tmp``: Chromium leaves its singleton's directory (``org.chromium.Chromium.*``) there
    after every run."""
    from selenium import webdriver

    driver_path = shutil.which("chromedriver")
    if driver_path is None:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=driver_path, env={**os.environ, "TMPDIR": str(tmp)})
    return webdriver.Chrome(options=options, service=service)
