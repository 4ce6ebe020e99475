"""The service's pages: the instructor's live class and a student's report and history.

``install(app, service)`` adds them to the API (``grader.service.app.create_app``): thin routes over
``grader.service.pages.data`` (read-only queries, and the regrade), rendered by Jinja2 templates
that escape every value (``autoescape``), so a student's name, file name or message is text on every
page.  The only HTML a template takes unescaped is a renderer's of the project (the class report's
histograms and pass rates, ``grader.render.class_report.class_shape``), which escapes its own.

Every response carries the headers of :data:`PAGE_POLICY`: no inline script or style, no framing, no
sniffing, no referrer.  A student's report (static HTML with inline CSS, no script) is served under
:data:`REPORT_POLICY`: styles only, sandboxed, framed by the service's own pages alone.

Live updates are short polling by ``static/pages.js``: a page's ``data-version-url`` answers a
version string every ``site.LIVE_POLL_MS``; when it moves, the script fetches the page again and swaps
its ``data-live`` parts, so a grade that lands shows within that and one page's fetch, with no reload.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from grader.render import fmt_points
from grader.render.html_kit import CSS
from grader.service import actions as changes
from grader.service import read
from grader.service.pages import actions, auth, data, mine
from grader.service.pages.site import HERE, Pages
from grader.service.refusal import Refused

STATIC = {"pages.css": "text/css; charset=utf-8", "pages.js": "text/javascript; charset=utf-8"}
PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
REPORT_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'; sandbox"
FORM_BYTES = 64 << 10


def install(app: FastAPI, service: Any) -> None:
    """The pages' routes and the security headers on every response of ``app``."""
    pages = Pages(service)
    app.include_router(router(pages))

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        path = request.url.path
        report = path.endswith("/report.html") or (path.startswith("/s/") and path.endswith("/report"))
        response.headers["Content-Security-Policy"] = REPORT_POLICY if report else PAGE_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN" if report else "DENY")
        if response.headers.get("content-type", "").startswith("text/html"):
            response.headers["Cache-Control"] = "no-store"
        return response


def router(pages: Pages) -> APIRouter:
    routes = APIRouter()
    config = pages.config

    async def form(request: Request) -> dict[str, str]:
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > FORM_BYTES:
                break
        parsed = parse_qs(body[:FORM_BYTES].decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in parsed.items()}

    def session_of(request: Request) -> auth.Session | None:
        return pages.sessions.get(request.cookies.get(auth.COOKIE))

    def to_login(request: Request) -> RedirectResponse:
        return RedirectResponse("/login?" + urlencode({"next": request.url.path}), status_code=303)

    def assignment_or_404(aid: str) -> Any:
        found = config.assignments.get(aid)
        if found is None:
            raise Refused(404, "unknown_assignment", f"there is no assignment {aid!r} on this service")
        return found

    async def checked_post(request: Request) -> tuple[auth.Session | None, dict[str, str], Response | None]:
        """The session and form of an instructor's POST; or the refusal: 401 without a session, 403
        without its CSRF token."""
        session = session_of(request)
        fields = await form(request)
        if session is None:
            return None, fields, auth.no_session()
        if not auth.csrf_ok(session, fields.get("csrf", "")):
            return None, fields, auth.bad_csrf()
        return session, fields, None

    @routes.get("/pages-static/{name}")
    def static(name: str) -> Response:
        if name not in STATIC:
            return PlainTextResponse("not found", status_code=404)
        if name == "pages.css":  # the reports' look, then the pages' own rules
            text = CSS + (HERE / "static" / name).read_text(encoding="utf-8")
            return Response(text, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})
        return FileResponse(HERE / "static" / name, media_type=STATIC[name])

    @routes.get("/favicon.ico")
    def favicon() -> Response:
        return Response(status_code=204)

    @routes.get("/login")
    def login_form(request: Request, next: str = "/assignments") -> Response:
        return pages.render("login.html", next=_local(next), error="")

    @routes.post("/login")
    async def login(request: Request) -> Response:
        fields = await form(request)
        sid = pages.sessions.login(fields.get("token", "").strip())
        target = _local(fields.get("next", ""))
        if sid is None:
            return pages.render("login.html", 401, next=target, error="That is not the instructor token.")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            auth.COOKIE,
            sid,
            max_age=auth.LIFETIME_S,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    @routes.post("/logout")
    async def logout(request: Request) -> Response:
        _, _, refused = await checked_post(request)
        if refused is not None:
            return refused
        pages.sessions.logout(request.cookies.get(auth.COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(auth.COOKIE, path="/")
        return response

    @routes.get("/")
    @routes.get("/assignments")
    def assignments(request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        return pages.render("assignments.html", session=session, assignments=list(config.assignments.values()))

    @routes.get("/assignments/{aid}")
    def class_page(aid: str, request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        assignment = assignment_or_404(aid)
        filters = data.Filters.parse(dict(request.query_params))
        similar = {student: "similarity" for student in pages.similarity.state(aid).nearest}
        view = data.class_view(pages.service.sessions, pages.cache, aid, assignment.roster or (), filters, similar)
        return pages.render(
            "class.html",
            session=session,
            assignment=assignment,
            filters=filters,
            view=view,
            page=min(filters.page, view.pages),
            queue=data.queue_view(pages.service.sessions, config, aid),
            shape=pages.shape(aid, view),
            statuses=data._STATUSES,
            version=data.version(pages.service.sessions, aid),
            here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        )

    @routes.get("/assignments/{aid}/version")
    def class_version(aid: str, request: Request) -> Response:
        if session_of(request) is None:
            return auth.no_session()
        assignment_or_404(aid)
        return JSONResponse({"version": data.version(pages.service.sessions, aid)})

    @routes.get("/assignments/{aid}/students/{student:path}")
    def student_history(aid: str, student: str, request: Request) -> Response:
        session = session_of(request)
        if session is None:
            return to_login(request)
        assignment = assignment_or_404(aid)
        pushes = data.history(pages.service.sessions, pages.cache, aid, student)
        return pages.render(
            "history.html",
            session=session,
            assignment=assignment,
            student=student,
            pushes=pushes,
            chart=_chart(pushes),
            manual=changes.manual_form(pages.service.sessions, config, assignment, student),
            version=data.version(pages.service.sessions, aid),
            here=request.url.path,
        )

    @routes.post("/assignments/{aid}/regrade")
    async def regrade(aid: str, request: Request) -> Response:
        _, fields, refused = await checked_post(request)
        if refused is not None:
            return refused
        assignment_or_404(aid)
        students = None if fields.get("all") == "1" else [fields.get("student", "")]
        await run_in_threadpool(data.regrade, pages.service.sessions, aid, students)
        return RedirectResponse(_local(fields.get("next", ""), f"/assignments/{quote(aid)}"), status_code=303)

    @routes.get("/assignments/{aid}/gradebook.csv")
    def gradebook(aid: str, request: Request) -> Response:
        if session_of(request) is None:
            return to_login(request)
        text = read.gradebook(config, pages.service.sessions, aid)
        disposition = f'attachment; filename="{quote(aid, safe="")}-gradebook.csv"'
        return PlainTextResponse(
            text, media_type="text/csv; charset=utf-8", headers={"Content-Disposition": disposition}
        )

    @routes.get("/s/{sid}")
    def student_page(sid: str, request: Request) -> Response:
        row = read.find(pages.service.sessions, sid)
        pushes = data.history(pages.service.sessions, pages.cache, row.assignment, row.student)
        return pages.render(
            "student.html",
            row=row,
            pushes=pushes,
            chart=_chart(pushes),
            version=_student_version(pushes),
        )

    @routes.get("/s/{sid}/version")
    def student_version(sid: str) -> Response:
        row = read.find(pages.service.sessions, sid)
        pushes = data.history(pages.service.sessions, pages.cache, row.assignment, row.student)
        return JSONResponse({"version": _student_version(pushes)})

    @routes.get("/s/{sid}/report")
    def student_report(sid: str) -> Response:
        row = read.find(pages.service.sessions, sid)
        return FileResponse(read.report(config, row), media_type="text/html; charset=utf-8")

    actions.add_routes(routes, pages, actions.Guard(session_of, checked_post, to_login, assignment_or_404))
    routes.include_router(mine.router(pages, form))
    return routes


def _student_version(pushes: list[data.Push]) -> str:
    """One student's own rows only: a student's page learns nothing of the class's activity."""
    return hashlib.sha256(repr([(p.sid, p.status, p.score) for p in pushes]).encode()).hexdigest()[:16]


def _local(target: str, default: str = "/assignments") -> str:
    """A redirect target on this service only (a path, never ``//host`` or a scheme)."""
    if target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return default


def _chart(pushes: list[data.Push]) -> dict[str, Any] | None:
    """The score-over-time line: SVG coordinates computed here, drawn without any script or style."""
    points = [(p.score, p.max_score) for p in pushes if p.score is not None and p.max_score]
    if not points:
        return None
    width, height, pad = 600, 160, 32
    step = (width - 2 * pad) / max(1, len(points) - 1)
    coords = [
        (pad + i * step, height - pad - (height - 2 * pad) * max(0.0, min(1.0, s / m)))
        for i, (s, m) in enumerate(points)
    ]
    return {
        "width": width,
        "height": height,
        "pad": pad,
        "line": " ".join(f"{x:.1f},{y:.1f}" for x, y in coords),
        "dots": [
            {"x": f"{x:.1f}", "y": f"{y:.1f}", "label": f"{fmt_points(s)}/{fmt_points(m)}"}
            for (x, y), (s, m) in zip(coords, points, strict=True)
        ],
        "max": fmt_points(points[-1][1]),
    }
