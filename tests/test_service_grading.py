"""The service grading for real (issue 59): ``grader serve`` as its own process, killed with
``kill -9`` in the middle of a grade and started again, must end every accepted submission graded
exactly once with its first receipt time, never grade a superseded one, score exactly as ``grader
grade`` of the same tree with the same secret, and rescore from the cache (nobody graded again) when
the deadline changes.  One class of two students, A5 (the cheapest pack), shared by every assertion.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

import httpx

from grader.service.workers import iso
from tests.oidc_issuer import Issuer
from tests.service_kit import ROOT, bundle, commit_tree, write_config

pytestmark = pytest.mark.slow  # about a minute: three service starts and four A5 gradings

SECRET = "the-grade-of-records-secret"
DONE = ("graded", "error", "superseded")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Run:
    root: Path
    config: Path
    url: str
    ids: dict[str, str]  # bob, alice-1 (superseded), alice-2
    trees: dict[str, Path]
    received: dict[str, str]
    graded: dict[str, dict]  # GET /api/v1/submissions/{id} once done
    direct: dict  # `grader grade` of bob's tree with the same secret and time: its results.json
    killed_while: str  # the status bob had when the service was killed
    reads: dict[str, str]  # bob's report.html and the gradebook, as the service answered them
    log: Path


class Server:
    def __init__(self, config: Path, url: str, log: Path) -> None:
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "grader", "serve", "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.url = url
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()[-3000:]
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError("the service did not start: " + log.read_text()[-3000:])

    def kill9(self) -> None:
        """``kill -9`` of the service alone: the grades it started die with it (their parent-death signal)."""
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # nothing it started outlives the test


def wait_done(url: str, ids: list[str], limit_s: float = 300) -> dict[str, dict]:
    deadline = time.monotonic() + limit_s
    while True:
        shown = {sid: httpx.get(f"{url}/api/v1/submissions/{sid}", timeout=10).json() for sid in ids}
        if all(doc["status"] in DONE for doc in shown.values()) or time.monotonic() > deadline:
            return shown
        time.sleep(0.5)


def _direct(tree: Path, received_at: str, out: Path) -> dict:
    secret = out.parent / f"{out.name}.secret"
    secret.write_text(SECRET)
    cmd = [sys.executable, "-m", "grader", "grade", str(tree), "--rubric", str(ROOT / "rubrics" / "a5.yaml")]
    cmd += ["--secret-file", str(secret), "--submitted-at", received_at, "--out", str(out), "--format", "json"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    return json.loads((out / "results.json").read_text())


def _configure(root: Path, issuer: Issuer, extra: str) -> tuple[Path, str]:
    """A service.yaml grading with ``SECRET`` on a free port; its URL."""
    (root / "secret").write_text(SECRET + "\n")
    port = _free_port()
    config = write_config(root, issuer, extra=extra + "secret_file: secret\n")
    config.write_text(config.read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}"))
    return config, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("service")
    issuer = Issuer(root)
    config, url = _configure(root, issuer, "workers: 1\nlease_s: 3\n")
    log = root / "service.log"
    trees = {"bob": ROOT / "reference" / "a5", "alice-1": ROOT / "student_template" / "a5"}
    trees["alice-2"] = trees["bob"]
    shas, bundles = {}, {}
    for name, tree in trees.items():
        repo = root / f"a5-{name.split('-')[0]}"
        shas[name] = commit_tree(repo, tree)
        bundles[name] = bundle(repo)
    server = Server(config, url, log)
    ids: dict[str, str] = {}
    received: dict[str, str] = {}
    try:
        for name in ("bob", "alice-1", "alice-2"):  # one worker: bob is graded first, alice-1 waits
            token = issuer.token(f"course-org/a5-{name.split('-')[0]}", shas[name])
            answer = httpx.post(
                f"{url}/api/v1/assignments/a5/submissions",
                content=bundles[name],
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            assert answer.status_code == 202, answer.text
            ids[name], received[name] = answer.json()["id"], answer.json()["received_at"]
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/api/v1/submissions/{ids['bob']}").json()["status"] == "queued":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(2)  # into bob's grade
        killed_while = httpx.get(f"{url}/api/v1/submissions/{ids['bob']}").json()["status"]
        server.kill9()
        server = Server(config, url, log)
        graded = wait_done(url, list(ids.values()))
        reads = {
            "report": httpx.get(f"{url}/api/v1/submissions/{ids['bob']}/report.html").text,
            "gradebook": httpx.get(
                f"{url}/api/v1/assignments/a5/gradebook.csv",
                headers={"Authorization": "Bearer " + (root / "state" / "instructor.token").read_text().strip()},
            ).text,
        }
    finally:
        server.stop()
    direct = _direct(trees["bob"], received["bob"], root / "direct-bob")
    yield Run(root, config, url, ids, trees, received, graded, direct, killed_while, reads, log)


def test_every_accepted_submission_ends_graded_once_with_its_first_receipt_time_after_a_kill_9(run):
    assert run.killed_while == "grading", "the kill must land inside a grade"
    for name in ("bob", "alice-2"):
        doc = run.graded[run.ids[name]]
        assert doc["status"] == "graded", (name, doc["error"], run.log.read_text()[-3000:])
        assert doc["received_at"] == run.received[name]
        assert doc["results"]["submission"]["submitted_at"].startswith(run.received[name].removesuffix("Z")[:19])
    state = run.root / "state" / "assignments" / "a5" / "submissions"
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == sorted(
        run.ids[n] for n in ("bob", "alice-2")
    )


def test_a_newer_push_supersedes_the_waiting_one_which_is_never_graded(run):
    doc = run.graded[run.ids["alice-1"]]
    assert (doc["status"], doc["results"], doc["graded_at"]) == ("superseded", None, None)
    assert not (run.root / "state" / "assignments" / "a5" / "submissions" / run.ids["alice-1"]).exists()


def test_each_score_equals_grader_grade_of_the_same_tree_with_the_same_secret(run):
    for name in ("bob", "alice-2"):  # alice's second push is bob's tree: the same score, graded apart
        served = run.graded[run.ids[name]]["results"]
        assert served["score"] == run.direct["score"], name
        assert [(t["id"], t["score"]) for t in served["tasks"]] == [(t["id"], t["score"]) for t in run.direct["tasks"]]
        assert served["submission"]["digest"] == run.direct["submission"]["digest"]


def test_the_report_and_the_gradebook_are_the_graded_results(run):
    bob = run.graded[run.ids["bob"]]
    assert "<html" in run.reads["report"].lower() and "bob" in run.reads["report"]
    header, *lines = run.reads["gradebook"].splitlines()
    rows = {line.split(",")[0]: line.split(",") for line in lines}
    assert set(rows) == {"alice", "bob"}
    assert float(rows["bob"][header.split(",").index("total")]) == pytest.approx(bob["results"]["score"])


def test_a_deadline_change_rescores_from_the_cache_and_grades_nobody_again(run):
    graded = run.root / "state" / "assignments" / "a5" / "submissions" / run.ids["bob"] / "graded"
    before = {p.name: p.stat().st_mtime_ns for p in graded.iterdir()}
    received = time.mktime(time.strptime(run.received["bob"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    deadline = iso(received - 3 * 86400)  # three days before bob pushed: 30 % off
    config = run.config.read_text().replace(
        "    repo_prefix: a5-\n", f"    repo_prefix: a5-\n    deadline: '{deadline}'\n"
    )
    run.config.write_text(config)
    server = Server(run.config, run.url, run.log)
    try:
        doc = httpx.get(f"{run.url}/api/v1/submissions/{run.ids['bob']}").json()
    finally:
        server.stop()
    results, old = doc["results"], run.graded[run.ids["bob"]]["results"]
    assert results["late"]["days_late"] == 3 and results["score"] < old["score"]
    assert results["score"] == pytest.approx(round(old["score"] * 0.7, 2), abs=0.01)
    assert {p.name: p.stat().st_mtime_ns for p in graded.iterdir()} == before  # no grade ran


def test_a_service_grading_on_a_dask_cluster_scores_as_its_local_worker(run, tmp_path):
    """``cluster: local:1``, a Dask cluster as ``grader batch --cluster`` takes it: bob's tree, graded by
    a Dask worker, gets the score, marks and digest the local worker gave it."""
    pytest.importorskip("distributed", reason='Dask is an optional extra: pip install "dist-grader[cluster]"')
    issuer = Issuer(tmp_path)
    config, url = _configure(tmp_path, issuer, "cluster: local:1\n")
    repo = tmp_path / "a5-bob"
    sha = commit_tree(repo, run.trees["bob"])
    server = Server(config, url, tmp_path / "service.log")
    try:
        answer = httpx.post(
            f"{url}/api/v1/assignments/a5/submissions",
            content=bundle(repo),
            headers={"Authorization": f"Bearer {issuer.token('course-org/a5-bob', sha)}"},
            timeout=60,
        )
        assert answer.status_code == 202, answer.text
        sid = answer.json()["id"]
        doc = wait_done(url, [sid])[sid]
    finally:
        server.stop()
    assert doc["status"] == "graded", (doc["error"], (tmp_path / "service.log").read_text()[-3000:])
    served, local = doc["results"], run.graded[run.ids["bob"]]["results"]
    assert served["score"] == local["score"] == run.direct["score"]
    assert [(t["id"], t["score"]) for t in served["tasks"]] == [(t["id"], t["score"]) for t in local["tasks"]]
    assert served["submission"]["digest"] == local["submission"]["digest"]


def test_the_service_logs_each_push_received_once_and_graded_once_through_the_kill(run):
    log = run.log.read_text()
    for name in ("bob", "alice-2"):
        sid, results = run.ids[name], run.graded[run.ids[name]]["results"]
        assert log.count(f"submission {sid} received: a5/{name.split('-')[0]} commit ") == 1, name
        assert log.count(f"submission {sid} graded: ") == 1, name
        assert f"submission {sid} graded: {results['score']}" in log, name
    assert f"submission {run.ids['alice-1']} graded" not in log  # superseded
