"""The instructor's actions that score again without grading (``grader.service.actions``): manual scores
entered on a student's history page or uploaded as a ``--manual`` file, a rescore from the rubric file,
and the similarity report of the latest submissions.

Every POST is refused without a session (401) or its CSRF token (403).  A refused change is a page
(200, the message as an alert and the form as typed): a browser logs any 4xx page as a console error.
The similarity report is the ``grader similarity`` page, which carries its own inline styles: it is
served under the reports' policy (``REPORT_POLICY``: styles only, no script, sandboxed), as a
student's report is.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import python_multipart  # noqa: F401  (the upload's form parser: starlette asks for it only at the first upload)
from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from grader.errors import UserError
from grader.manual import ManualScores, parse_points
from grader.render.similarity import HTML_NAME
from grader.seal import load_key
from grader.service import actions
from grader.service.pages import auth
from grader.service.refusal import error

if TYPE_CHECKING:
    from grader.service.pages.site import Pages

UPLOAD_BYTES = 2 << 20  # the whole request of a manual-scores upload
Handler = Callable[[auth.Session, dict[str, str], Any], Awaitable[Response]]


@dataclass(frozen=True)
class Guard:
    """The pages' checks, as ``grader.service.pages.router`` makes them."""

    session_of: Callable[[Request], auth.Session | None]
    checked_post: Callable[[Request], Awaitable[tuple[auth.Session | None, dict[str, str], Response | None]]]
    to_login: Callable[[Request], Response]
    assignment_or_404: Callable[[str], Any]


def manual_fields(form: actions.ManualForm, fields: dict[str, str]) -> actions.Change:
    """The form's manual scores: a filled ``points-<item>`` sets the item's score, an empty one leaves
    (or puts) it at its automatic score.  Points read by the ``--manual`` file's own rule."""
    change = actions.Change(ManualScores())
    for item in form.items:
        text = fields.get(f"points-{item.id}", "").strip()
        if not text:
            change.removed.add(item.id)
            continue
        change.scores.scores[item.id] = parse_points(text, item.id)
        comment = " ".join(fields.get(f"comment-{item.id}", "").split())[:2000]
        if comment:
            change.scores.comments[item.id] = comment
    return change


def add_routes(routes: APIRouter, pages: Pages, guard: Guard) -> None:
    config = pages.config
    service = pages.service
    runs = pages.similarity

    @functools.cache
    def key() -> bytes:  # read at the first action, not at every start of the pages
        return load_key(config.seal_key, config.state_dir / "assignments")

    def done(
        session: auth.Session, assignment: Any, title: str, message: str, status: int = 200, **extra: Any
    ) -> Response:
        return pages.render(
            "action.html", status, session=session, assignment=assignment, title=title, message=message, **extra
        )

    def instructor_post(path: str) -> Callable[[Handler], Handler]:
        """``handle(session, form, assignment)`` as the POST route ``path``, refused without a session or
        its CSRF token."""

        def add(handle: Handler) -> Handler:
            async def route(aid: str, request: Request) -> Response:
                session, fields, refused = await guard.checked_post(request)
                if refused is not None or session is None:
                    return refused or Response(status_code=401)
                return await handle(session, fields, guard.assignment_or_404(aid))

            routes.add_api_route(path, route, methods=["POST"])
            return handle

        return add

    @instructor_post("/assignments/{aid}/manual")
    async def manual(session: auth.Session, fields: dict[str, str], assignment: Any) -> Response:
        student = fields.get("student", "")
        form = await run_in_threadpool(actions.manual_form, service.sessions, config, assignment, student)
        try:
            change = manual_fields(form, fields)
            await run_in_threadpool(
                actions.enter_manual, config, service.sessions, key(), assignment, {student: change}
            )
        except UserError as exc:
            typed = {
                item.id: (fields.get(f"points-{item.id}", ""), fields.get(f"comment-{item.id}", ""))
                for item in form.items
            }
            return done(
                session, assignment, "Manual scores not saved", str(exc), student=student, form=form, typed=typed
            )
        back = f"/assignments/{quote(assignment.id, safe='')}/students/{quote(student, safe='')}"
        return RedirectResponse(back, status_code=303)

    @routes.get("/assignments/{aid}/manual-upload")
    def manual_upload_form(aid: str, request: Request) -> Response:
        session = guard.session_of(request)
        if session is None:
            return guard.to_login(request)
        return pages.render("manual_upload.html", session=session, assignment=guard.assignment_or_404(aid))

    @routes.post("/assignments/{aid}/manual-upload")
    async def manual_upload(aid: str, request: Request) -> Response:
        session = guard.session_of(request)
        if session is None:
            return auth.no_session()
        declared = request.headers.get("content-length", "")
        if not declared.isdigit() or int(declared) > UPLOAD_BYTES:
            message = f"a manual-scores upload is at most {UPLOAD_BYTES >> 20} MiB, its length declared"
            return error(413, "too_large", message)
        try:
            async with request.form(max_files=1, max_fields=8) as fields:
                csrf, upload = fields.get("csrf"), fields.get("file")
                ok = isinstance(csrf, str) and auth.csrf_ok(session, csrf)
                name = upload.filename or "" if isinstance(upload, UploadFile) else ""
                data = await upload.read(actions.MANUAL_BYTES + 1) if isinstance(upload, UploadFile) else b""
        except Exception:  # not a multipart form: malformed input gets a clear refusal
            ok, name, data = False, "", b""
        if not ok:
            return auth.bad_csrf()
        assignment = guard.assignment_or_404(aid)
        try:
            scores = actions.parse_manual_upload(name or "manual.csv", data)
            changes = {student: actions.Change(entry) for student, entry in scores.items()}
            results = await run_in_threadpool(
                actions.enter_manual, config, service.sessions, key(), assignment, changes
            )
        except UserError as exc:
            return done(session, assignment, "Manual scores not saved", str(exc))
        lines = [f"{student}: {result.score:g}/{result.max_score:g}" for student, result in results.items()]
        message = f"manual scores of {len(results)} students saved and rescored:\n" + "\n".join(lines)
        return done(session, assignment, "Manual scores saved", message)

    @instructor_post("/assignments/{aid}/rescore")
    async def rescore(session: auth.Session, _: dict[str, str], assignment: Any) -> Response:
        aid = assignment.id
        try:
            message = await run_in_threadpool(actions.rescore_from_rubric, config, service.sessions, key(), aid)
        except UserError as exc:
            return done(session, assignment, "Not rescored", str(exc))
        return done(session, config.assignments[aid], "Rescored from the rubric file", message)

    @instructor_post("/assignments/{aid}/similarity")
    async def similarity_start(session: auth.Session, _: dict[str, str], assignment: Any) -> Response:
        runs.start(service.sessions, assignment)
        return RedirectResponse(f"/assignments/{quote(assignment.id, safe='')}/similarity", status_code=303)

    def similarity_state(aid: str) -> tuple[actions.SimilarityState, bool]:
        state = runs.state(aid)
        report = (actions.similarity_dir(config, aid) / HTML_NAME).is_file()
        return state, report

    @routes.get("/assignments/{aid}/similarity")
    def similarity_page(aid: str, request: Request) -> Response:
        session = guard.session_of(request)
        if session is None:
            return guard.to_login(request)
        assignment = guard.assignment_or_404(aid)
        state, report = similarity_state(aid)
        return pages.render(
            "similarity.html",
            session=session,
            assignment=assignment,
            state=state,
            report=report,
            version=f"{state.state}:{state.finished_at}",
        )

    @routes.get("/assignments/{aid}/similarity/version")
    def similarity_version(aid: str, request: Request) -> Response:
        if guard.session_of(request) is None:
            return auth.no_session()
        guard.assignment_or_404(aid)
        state = runs.state(aid)
        return JSONResponse({"version": f"{state.state}:{state.finished_at}"})

    @routes.get("/assignments/{aid}/similarity/report.html")
    def similarity_report(aid: str, request: Request) -> Response:
        if guard.session_of(request) is None:
            return guard.to_login(request)
        guard.assignment_or_404(aid)
        path = actions.similarity_dir(config, aid) / HTML_NAME
        if not path.is_file():
            return error(404, "no_report", "run the similarity check first")
        return FileResponse(path, media_type="text/html; charset=utf-8")
