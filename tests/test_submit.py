"""``grader submit``: the student's door onto the grading service.

The client is checked here against a local HTTP server that speaks the service's API contract (POST a
bundle, 202 with a receipt; GET the submission until it is final) and GitHub Actions' OIDC token protocol.
The server records what it was sent, so each test reads what the client really put on the wire.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from local_service import JSONHandler
from service_kit import git

from grader import submit
from grader.render.outputs import write_outputs
from grader.results import GradeResult

ROOT = Path(__file__).resolve().parents[1]
GRADED = ROOT / "tests" / "fixtures" / "results" / "graded.json"
TOY = ROOT / "tests" / "toy_pack"
SUBMISSION_ID = "s" * 32


class Service:
    """A local server playing the grading service and GitHub's token service, recording every request.

    ``refuse`` (status, code) makes the POST answer that error; ``final`` is the submission's last status;
    the first GET answers ``queued``, so the client must poll."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.refuse: tuple[int, str] | None = None
        self.final = "graded"
        self.results: dict[str, Any] = json.loads(GRADED.read_text())
        self.gets = 0
        outer = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append(("POST", self.path, dict(self.headers), body))
                if outer.refuse is not None:
                    status, code = outer.refuse
                    self.answer(status, {"error": {"code": code, "message": f"refused: {code}"}})
                    return
                receipt = {"id": SUBMISSION_ID, "status": "queued", "received_at": "2026-02-05T09:00:00Z"}
                receipt |= {"student": "octocat", "commit": "0" * 40, "page": f"/s/{SUBMISSION_ID}"}
                self.answer(202, {**receipt, "url": f"/api/v1/submissions/{SUBMISSION_ID}"})

            def do_GET(self) -> None:
                outer.requests.append(("GET", self.path, dict(self.headers), b""))
                parts = urlsplit(self.path)
                if parts.path == "/actions-token":  # GitHub's protocol: the audience in the query, a bearer
                    if self.headers["Authorization"] != "bearer request-token":
                        self.answer(401, {"message": "bad request token"})
                        return
                    audience = parse_qs(parts.query)["audience"][0]
                    self.answer(200, {"count": 1, "value": f"oidc-for:{audience}"})
                    return
                outer.gets += 1
                final = outer.gets > 1
                self.answer(
                    200,
                    {
                        "id": SUBMISSION_ID,
                        "status": outer.final if final else "queued",
                        "student": "octocat",
                        "results": outer.results if final and outer.final == "graded" else None,
                        "error": None,
                    },
                )

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def posts(self) -> list[tuple[str, str, dict[str, str], bytes]]:
        return [r for r in self.requests if r[0] == "POST"]


@pytest.fixture
def service() -> Iterator[Service]:
    served = Service()
    yield served
    served.http.shutdown()
    served.http.server_close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A student's repository of two commits, with changes in the working tree that are not committed."""
    repo = tmp_path / "student"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "collectives.py").write_text("# first\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    (repo / "src" / "collectives.py").write_text("# second\n")
    (repo / "src" / "transformer.py").write_text("# committed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "second")
    (repo / "src" / "collectives.py").write_text("# edited, not committed\n")
    (repo / "untracked.py").write_text("# never added\n")
    return repo


def bundle_contents(data: bytes) -> tuple[dict[bytes, bytes], list[bytes], dict[str, bytes]]:
    """The bundle's refs, prerequisites and the files of its tip's tree, read as the service reads it."""
    from dulwich.bundle import read_bundle
    from dulwich.object_store import MemoryObjectStore

    with read_bundle(io.BytesIO(data)) as bundle:
        store = MemoryObjectStore()
        bundle.store_objects(store)
        refs, prerequisites = dict(bundle.references), [sha for sha, _ in bundle.prerequisites]
    files = {}
    for entry in store.iter_tree_contents(store[refs[b"HEAD"]].tree):
        files[entry.path.decode()] = store[entry.sha].data
    return refs, prerequisites, files


def run_submit(
    directory: Path, server: str, *extra: str, env: dict[str, str] | None = None, assignment: str = "a9"
) -> Any:
    """``grader submit`` as a student runs it, in a process of its own."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("ACTIONS_", "GRADER_SUBMIT", "GITHUB_"))}
    cmd = [sys.executable, "-m", "grader", "submit", str(directory), "--server", server, "--assignment", assignment]
    return subprocess.run(
        [*cmd, *extra], env={**environ, **(env or {})}, capture_output=True, text=True, check=False, timeout=120
    )


# --- the commit ---------------------------------------------------------------------------------------------


def test_the_bundle_is_head_and_nothing_of_the_working_tree_outside_it(repo: Path, tmp_path: Path) -> None:
    data, head = submit.bundle_head(repo / "src")  # from a folder inside the repository too
    refs, prerequisites, files = bundle_contents(data)
    assert head == git(repo, "rev-parse", "HEAD").strip()
    assert refs == {b"HEAD": head.encode()} and prerequisites == []  # whole: the service takes no other
    assert files == {"src/collectives.py": b"# second\n", "src/transformer.py": b"# committed\n"}
    bundle = tmp_path / "head.bundle"
    bundle.write_bytes(data)
    git(tmp_path, "clone", "-q", str(bundle), "cloned")  # git itself takes it whole, history included
    assert git(tmp_path / "cloned", "rev-list", "HEAD").split() == git(repo, "rev-list", "HEAD").split()


def test_a_shallow_checkout_bundles_what_it_holds(repo: Path, tmp_path: Path) -> None:
    """actions/checkout fetches one commit: the bundle is that commit, its parent left out, not missed."""
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", "shallow")
    data, _ = submit.bundle_head(tmp_path / "shallow")
    refs, prerequisites, files = bundle_contents(data)
    assert refs == {b"HEAD": git(repo, "rev-parse", "HEAD").strip().encode()} and prerequisites == []
    assert set(files) == {"src/collectives.py", "src/transformer.py"}


def test_a_hostile_repository_config_never_runs(repo: Path) -> None:
    """Hooks, a filter driver, fsmonitor, a pager, an alias: every program the config names would write
    a file; none does, and the bundle is still HEAD."""
    ran = repo.parent / "ran"
    program = f"sh -c 'touch {ran}'"
    for key, value in {
        "core.fsmonitor": program,
        "core.pager": program,
        "core.sshCommand": program,
        "gpg.program": program,
        "log.showSignature": "true",
        "filter.evil.clean": program,
        "filter.evil.smudge": program,
        "filter.evil.process": program,
        "diff.external": program,
        "alias.bundle": f"!{program}",
        "core.hooksPath": str(repo / "hooks"),
    }.items():
        git(repo, "config", key, value)
    (repo / "hooks").mkdir()
    for hook in ("pre-commit", "post-checkout", "pre-push", "reference-transaction", "post-index-change"):
        (repo / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {ran}\n")
        (repo / "hooks" / hook).chmod(0o755)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    data, head = submit.bundle_head(repo)
    assert not ran.exists()
    assert bundle_contents(data)[0] == {b"HEAD": head.encode()}


def test_a_directory_without_a_commit_is_not_graded_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(submit.NotGraded, match="not in a git repository"):
        submit.bundle_head(tmp_path)
    git(tmp_path, "init", "-q")
    with pytest.raises(submit.NotGraded, match="no commit yet"):
        submit.bundle_head(tmp_path)


# --- the token ----------------------------------------------------------------------------------------------


def test_the_token_comes_from_githubs_oidc_protocol_for_the_server_as_given(service: Service) -> None:
    environ = {
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{service.url}/actions-token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token",
    }
    assert submit.submit_token(environ, "https://grader.example.edu/") == "oidc-for:https://grader.example.edu/"
    method, path, headers, _ = service.requests[-1]
    assert method == "GET" and parse_qs(urlsplit(path).query)["api-version"] == ["2.0"]
    assert headers["Authorization"] == "bearer request-token"
    # A token the course handed out wins; without either, one clear line.
    assert submit.submit_token({**environ, "GRADER_SUBMIT_TOKEN": "course-token\n"}, "x") == "course-token"
    with pytest.raises(submit.NotGraded, match="no token: set GRADER_SUBMIT_TOKEN"):
        submit.submit_token({}, "x")
    with pytest.raises(submit.NotGraded, match="401"):
        submit.submit_token({**environ, "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "wrong"}, "x")


# --- the service: graded, refused, unreachable ------------------------------------------------------------


def test_a_graded_push_prints_the_table_and_page_and_writes_what_grade_writes(
    service: Service, repo: Path, tmp_path: Path
) -> None:
    env = {
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{service.url}/actions-token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token",
    }
    out = tmp_path / "out"
    proc = run_submit(repo, service.url + "/", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    [(_, path, headers, body)] = service.posts()
    assert path == "/api/v1/assignments/a9/submissions"
    assert headers["Authorization"] == f"Bearer oidc-for:{service.url}/"  # the audience: --server as given
    assert headers["Content-Type"] == "application/octet-stream"
    assert bundle_contents(body)[0] == {b"HEAD": git(repo, "rev-parse", "HEAD").strip().encode()}
    assert service.gets == 2  # queued, then graded: it waited
    polls = [headers for method, path, headers, _ in service.requests if path.startswith("/api/v1/submissions/")]
    assert len(polls) == 2 and not [h for h in polls if "Authorization" in h]  # the token went with the POST only
    result = GradeResult.from_dict(service.results)
    from grader.render.outputs import render

    assert proc.stdout.splitlines()[:-1] == render(result, "terminal", color=False).splitlines()
    assert proc.stdout.splitlines()[-1] == f"{service.url}/s/{SUBMISSION_ID}"  # the page, on a line of its own
    expected = tmp_path / "grade-out"
    write_outputs(result, expected, None)  # what `grader grade --out` writes for these results
    for written in expected.iterdir():
        assert (out / written.name).read_bytes() == written.read_bytes(), written.name
    assert "<html" in (out / "report.html").read_text().lower()
    reporter = json.loads((out / "classroom.json").read_text())
    assert reporter["max_score"] == result.max_score
    assert base64.b64encode((out / "classroom.json").read_bytes())  # what the workflow hands the reporter


def test_a_refused_push_is_one_clear_line_and_exit_1(service: Service, repo: Path) -> None:
    service.refuse = (401, "token_expired")
    proc = run_submit(repo, service.url, env={"GRADER_SUBMIT_TOKEN": "tok"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "grader: your push was not graded: the grading service answered 401: refused: token_expired (token_expired)"
    ]
    assert proc.stdout == ""


def test_an_unreachable_service_is_one_clear_line_and_exit_1(repo: Path) -> None:
    proc = run_submit(repo, "http://127.0.0.1:9", env={"GRADER_SUBMIT_TOKEN": "tok"})
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("grader: your push was not graded: the grading service is unreachable at http://127.0.0.1:9")


def test_no_wait_prints_the_page_once_queued(service: Service, repo: Path) -> None:
    proc = run_submit(repo, service.url, "--no-wait", env={"GRADER_SUBMIT_TOKEN": "tok"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{service.url}/s/{SUBMISSION_ID}\n" and service.gets == 0
    assert service.posts()[0][2]["Authorization"] == "Bearer tok"


def test_audience_names_the_url_the_service_knows_itself_by(service: Service, repo: Path) -> None:
    """Behind a proxy the URL a job reaches may not be the service's oidc.audience: --audience says it."""
    env = {
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{service.url}/actions-token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token",
    }
    proc = run_submit(repo, service.url, "--no-wait", "--audience", "https://grader.example.edu", env=env)
    assert proc.returncode == 0, proc.stderr
    assert service.posts()[0][2]["Authorization"] == "Bearer oidc-for:https://grader.example.edu"


def test_a_superseded_push_is_not_graded_and_says_so(service: Service, repo: Path) -> None:
    service.final = "superseded"
    proc = run_submit(repo, service.url, env={"GRADER_SUBMIT_TOKEN": "tok"})
    assert proc.returncode == 1
    assert "your push was not graded: a newer push of yours superseded it" in proc.stderr


def test_results_that_are_not_a_results_document_are_one_line_not_a_traceback(service: Service, repo: Path) -> None:
    service.results = {"score": "all of them"}
    proc = run_submit(repo, service.url, env={"GRADER_SUBMIT_TOKEN": "tok"})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "grader: your push was not graded: the service's results are not a results document this grader reads"
    )


def test_the_wait_is_bounded_and_rides_out_a_restarting_service() -> None:
    """Polls back off (0.5 s, x1.5, at most 5 s); a service that stays away ends the wait with the reason."""
    receipt = submit.Receipt("id", "c", "http://127.0.0.1:9/api/v1/submissions/id", "http://127.0.0.1:9/s/id")
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    with pytest.raises(submit.NotGraded, match=r"no grade within the wait \(the grading service is unreachable"):
        submit.wait_for_grade(receipt, deadline=30.0, sleep=sleep, clock=lambda: now[0])
    assert slept[:4] == [0.5, 0.75, 1.125, 1.6875] and max(slept) == 5.0 and sum(slept) <= 30.0


# --- end to end: the real service ---------------------------------------------------------------------------


def test_against_the_real_service_a_push_is_graded_as_grader_grade_grades_it(tmp_path: Path) -> None:
    """``grader serve`` (SQLite, a local OIDC issuer), GitHub's token protocol played locally: the toy pack's
    right answer is graded 10/10 and the files --out writes are the service's results rendered.  A token the
    service never issued is refused in one line."""
    from local_service import OWNER, actions_token_endpoint, free_port, local_service
    from oidc_issuer import Issuer

    repo = tmp_path / "toy-octocat"
    shutil.copytree(TOY / "submission", repo)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "double")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    issuer = Issuer(tmp_path, audience=url)
    toy = [{"id": "toy", "rubric": str(TOY / "rubric.yaml"), "repo_prefix": "toy-"}]
    with (
        local_service(tmp_path, issuer, toy, port=port) as service,
        actions_token_endpoint(issuer, f"{OWNER}/toy-octocat", git(repo, "rev-parse", "HEAD").strip()) as actions,
    ):
        out = tmp_path / "out"
        proc = run_submit(repo, url, "--out", str(out), env=actions, assignment="toy")
        assert proc.returncode == 0, proc.stderr + service.log.read_text()[-2000:]
        refused = run_submit(repo, url, env={"GRADER_SUBMIT_TOKEN": "gst_not-one-of-ours"}, assignment="toy")
    served = GradeResult.load(out / "results.json")
    assert (served.score, served.max_score) == (10, 10)
    assert proc.stdout.splitlines()[-1].startswith(f"{url}/s/")
    expected = tmp_path / "served-rendered"
    write_outputs(served, expected, None)
    assert {p.name: p.read_bytes() for p in expected.iterdir()} == {
        p.name: (out / p.name).read_bytes() for p in expected.iterdir()
    }
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith("grader: your push was not graded: the grading service answered 401")
