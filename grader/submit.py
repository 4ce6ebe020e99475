"""``grader submit``: hand HEAD to the grading service and show the grade of record.

The student's door onto the service (``grader serve``), from a laptop or from the Classroom workflow.
It runs on a student's machine with the base install, so it speaks HTTP with the standard library.

1. The commit: HEAD as a whole git bundle (``git bundle create x HEAD``), written by dulwich: HEAD's
   commits, trees and blobs as far back as the clone holds them (a workflow's checkout: HEAD alone), nothing
   of the working tree outside HEAD, and nothing a repository's configuration names (hooks, filters,
   fsmonitor, a pager) ever runs.
2. The token proves who is asking: ``GRADER_SUBMIT_TOKEN`` (a course without Classroom hands one to each
   student), else the GitHub Actions job's OIDC token, asked of the runner for the service's audience.
3. ``POST`` the bundle, then poll the submission with backoff until it is graded (bounded), and render
   the results document as ``grader grade`` does: the same table, the same ``--out`` files.

Every failure is one line, ``your push was not graded: <reason>`` (exit 1), never a traceback.

``grader submit --list`` sends nothing: with ``GRADER_SUBMIT_TOKEN`` it lists the student's submissions
of the assignment, newest first, each with its page (``GET /api/v1/assignments/{id}/submissions``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.results import GradeResult

TOKEN_ENV = "GRADER_SUBMIT_TOKEN"
ACTIONS_URL_ENV = "ACTIONS_ID_TOKEN_REQUEST_URL"
ACTIONS_TOKEN_ENV = "ACTIONS_ID_TOKEN_REQUEST_TOKEN"
REQUEST_TIMEOUT_S = 60.0  # one HTTP request: a bundle upload on a slow link included
WAIT_S = 1500.0  # the whole wait for a grade: under the workflow's 30 minutes
POLL_FIRST_S = 0.5  # the first poll's delay; each next one is 1.5x longer, up to POLL_MOST_S
POLL_MOST_S = 5.0
#: The submission statuses after which nothing changes (the contract of GET /api/v1/submissions/{id}).
FINAL = ("graded", "superseded", "error")
MESSAGE_CHARS = 300  # of a server's error message, shown on the one line


class NotGraded(UserError):
    """The push was refused, lost or never reached the service: the one line says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"your push was not graded: {reason}")
        self.reason = reason


@dataclass(frozen=True)
class Receipt:
    """The service's 202: the submission is a row in its queue."""

    id: str
    commit: str
    url: str  # the API resource, absolute
    page: str  # the student's page, absolute


def main(args: argparse.Namespace) -> int:
    """``grader submit``: 0 once graded (whatever the score), 1 when not graded, 2 on a grader error."""
    server = args.server.rstrip("/")
    if args.list:
        return list_own(server, args.assignment, os.environ.get(TOKEN_ENV, "").strip())
    bundle, head = bundle_head(Path(args.dir))
    token = submit_token(os.environ, args.audience or args.server)
    receipt = post_bundle(server, args.assignment, bundle, token)
    print(f"grader: submitted {head[:12]} as {receipt.id}", file=sys.stderr)
    if args.no_wait:
        print(receipt.page)
        return 0
    submission = wait_for_grade(receipt, deadline=time.monotonic() + args.timeout)
    if submission["status"] == "superseded":
        raise NotGraded(f"a newer push of yours superseded it; see {receipt.page}")
    result = _results(submission.get("results"))
    if result is None:
        reason = _one_line(str(submission.get("error") or "the service gave no results"))
        print(f"grader: the service could not grade this push: {reason}; see {receipt.page}", file=sys.stderr)
        return 2
    show(result, args.out, student=submission.get("student"))
    print(receipt.page)
    return 0 if result.status == "graded" else 2


def list_own(server: str, assignment: str, token: str) -> int:
    """``--list``: one line per submission of the token's student, newest first: received, status, score
    and the page.  Only a course token lists (GitHub's job tokens are for one push)."""
    from grader.render import fmt_points

    if not token:
        raise UserError(f"cannot list your submissions: set {TOKEN_ENV} to the token your course gave you")
    url = f"{server}/api/v1/assignments/{urllib.parse.quote(assignment, safe='')}/submissions"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        answer = _json_answer(request, "the grading service")
        rows = [
            (str(s["received_at"]), str(s["status"]), _number(s["score"]), _number(s["max_score"]), str(s["page"]))
            for s in answer["submissions"]
        ]
    except NotGraded as exc:
        raise UserError(f"cannot list your submissions: {exc.reason}") from None
    except (KeyError, TypeError, ValueError):
        raise UserError("cannot list your submissions: the service answered without a list") from None
    if not rows:
        print(f"no submissions to {assignment} yet")
    for received, status, score, most, page in rows:
        points = f"{fmt_points(score)}/{fmt_points(most)}" if score is not None and most else "-"
        print(f"{received:22s} {status:11s} {points:>11s}  {urllib.parse.urljoin(server + '/', page)}")
    return 0


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _results(document: Any) -> GradeResult | None:
    """The submission's results document as the canonical model; None where there is none."""
    if not document:
        return None
    try:
        return GradeResult.from_dict(document)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise NotGraded("the service's results are not a results document this grader reads") from None


def show(result: GradeResult, out: Path | None, *, student: str | None = None) -> None:
    """What ``grader grade`` shows and writes for ``result``: its renderers, not copies of them."""
    from grader.pipeline import _show
    from grader.render.outputs import write_outputs, write_text
    from grader.render.student_report import render_student_report

    _show(result, None)
    if out is not None:
        write_outputs(result, out, None)
        write_text(out / "report.html", render_student_report(result, student=student))


# --- the commit --------------------------------------------------------------------------------------------


def bundle_head(directory: Path) -> tuple[bytes, str]:
    """HEAD of the repository at or above ``directory`` as the bytes of a git bundle, and its sha.

    The bundle's one ref, ``HEAD``, is the commit; its pack holds every object reachable from it that the
    repository has, and no prerequisites (the service takes whole bundles only; a shallow clone's history
    ends where the clone's does).  Read by dulwich: no git, no configuration obeyed.
    """
    from dulwich.bundle import Bundle, write_bundle
    from dulwich.errors import NotGitRepository
    from dulwich.objects import Commit
    from dulwich.pack import full_unpacked_object
    from dulwich.refs import HEADREF
    from dulwich.repo import Repo

    try:
        repo = Repo.discover(str(directory))
    except NotGitRepository:
        raise NotGraded(f"{directory} is not in a git repository (commit your work, then submit)") from None
    with repo:
        try:
            sha = repo.refs[HEADREF]
        except KeyError:
            raise NotGraded(f"{directory}: the repository has no commit yet (commit your work, then submit)") from None
        commit = repo[sha]
        if not isinstance(commit, Commit):
            raise NotGraded(f"HEAD of {directory} is not a commit")
        objects = list(_reachable(repo, commit))

        class _Objects:  # dulwich's PackDataLike: what write_bundle reads of a pack
            object_format = repo.object_format

            def __len__(self) -> int:
                return len(objects)

            def iter_unpacked(self) -> Iterator[Any]:
                return (full_unpacked_object(obj) for obj in objects)

            def close(self) -> None:
                pass

        bundle = Bundle()
        bundle.version = 2
        bundle.capabilities = {}
        bundle.prerequisites = []
        bundle.references = {HEADREF: sha}
        bundle.pack_data = _Objects()
        buffer = io.BytesIO()
        write_bundle(buffer, bundle)
    return buffer.getvalue(), sha.decode("ascii")


def _reachable(repo: Any, head: Any) -> Iterator[Any]:
    """``head``, its ancestors the repository holds, and every tree and blob of them, each once.  Parents
    past a shallow clone's edge and submodules' commits (of other repositories) are not here and stay out."""
    from dulwich.objects import S_ISGITLINK, Commit, Tree

    seen: set[bytes] = set()
    stack = [head.id]
    while stack:
        sha = stack.pop()
        if sha in seen or sha not in repo.object_store:
            continue
        seen.add(sha)
        obj = repo[sha]
        yield obj
        if isinstance(obj, Commit):
            stack += [*obj.parents, obj.tree]
        elif isinstance(obj, Tree):
            stack += [entry.sha for entry in obj.iteritems() if not S_ISGITLINK(entry.mode)]


# --- the token ---------------------------------------------------------------------------------------------


def submit_token(environ: Mapping[str, str], audience: str) -> str:
    """``GRADER_SUBMIT_TOKEN``, else the Actions job's OIDC token for ``audience`` (GitHub's protocol: a GET
    to ``$ACTIONS_ID_TOKEN_REQUEST_URL&audience=...`` with the request token as bearer, answering
    ``{"value": JWT}``)."""
    token = environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    url, bearer = environ.get(ACTIONS_URL_ENV), environ.get(ACTIONS_TOKEN_ENV)
    if not url or not bearer:
        raise NotGraded(
            f"no token: set {TOKEN_ENV} to the token your course gave you, or run in GitHub Actions with "
            "`permissions: id-token: write`"
        )
    request = urllib.request.Request(
        f"{url}&audience={urllib.parse.quote(audience, safe='')}", headers={"Authorization": f"bearer {bearer}"}
    )
    answer = _json_answer(request, "GitHub's OIDC token service")
    value = answer.get("value") if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value:
        raise NotGraded("GitHub's OIDC token service answered without a token (is `id-token: write` granted?)")
    return value


# --- the service -------------------------------------------------------------------------------------------


def post_bundle(server: str, assignment: str, bundle: bytes, token: str) -> Receipt:
    """``POST /api/v1/assignments/{id}/submissions``: the 202's receipt, or the refusal as NotGraded."""
    url = f"{server}/api/v1/assignments/{urllib.parse.quote(assignment, safe='')}/submissions"
    request = urllib.request.Request(
        url,
        data=bundle,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"},
    )
    answer = _json_answer(request, "the grading service")
    try:
        return Receipt(
            id=str(answer["id"]),
            commit=str(answer["commit"]),
            url=urllib.parse.urljoin(server + "/", str(answer["url"])),
            page=urllib.parse.urljoin(server + "/", str(answer["page"])),
        )
    except (KeyError, TypeError):
        raise NotGraded("the grading service answered without a receipt") from None


def wait_for_grade(
    receipt: Receipt,
    *,
    deadline: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Poll the submission, 0.5 s then 1.5x longer each time up to 5 s, until its status is final.

    A service that cannot be reached for a while (restarted after a crash: nothing accepted is lost)
    is asked again until ``deadline``; a refusal (4xx) ends the wait at once.  The token is not sent again:
    the submission's unguessable id is what reads it.
    """
    request = urllib.request.Request(receipt.url)
    delay = POLL_FIRST_S
    last = "it was not graded in time"
    while True:
        try:
            answer = _json_answer(request, "the grading service")
        except Unreachable as exc:
            last = exc.reason
        else:
            if isinstance(answer, dict) and answer.get("status") in FINAL:
                return answer
        if clock() + delay > deadline:
            raise NotGraded(f"no grade within the wait ({last}); see {receipt.page} later")
        sleep(delay)
        delay = min(delay * 1.5, POLL_MOST_S)


class Unreachable(NotGraded):
    """No answer, or a 5xx: the service may be back soon."""


def _json_answer(request: urllib.request.Request, who: str) -> Any:
    """The JSON body of a 2xx answer; a 4xx refusal as NotGraded with the service's own message, no
    answer or a 5xx as Unreachable."""
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        message = _error_message(exc.read() if exc.fp is not None else b"") or exc.reason
        reason = f"{who} answered {exc.code}: {message}"
        raise (Unreachable(reason) if exc.code >= 500 else NotGraded(reason)) from None
    except (urllib.error.URLError, OSError) as exc:
        why = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise Unreachable(f"{who} is unreachable at {_where(request.full_url)} ({_one_line(str(why))})") from None
    try:
        return json.loads(body)
    except ValueError:
        raise NotGraded(f"{who} answered something other than JSON") from None


def _error_message(body: bytes) -> str:
    """``{"error": {"code", "message"}}``'s message, on one line; "" for anything else."""
    try:
        error = json.loads(body)["error"]
        return _one_line(f"{error['message']} ({error['code']})")
    except (ValueError, KeyError, TypeError):
        return ""


def _where(url: str) -> str:
    """The URL without its query: GitHub's token request URL carries a secret there."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."
