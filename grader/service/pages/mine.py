"""A student's list of their own submissions, opened with their course token (``grader service tokens``).

``GET /s`` is a form (the assignment, the token); ``POST /s`` answers the list of that student's
submissions, each linking to its page ``/s/{id}``, from the same function as the API's
``GET /api/v1/assignments/{id}/submissions`` (``grader.service.read.own_submissions``).

The token travels only in the POST's body: never in an address (history, logs, a Referer), never in
a cookie.  The answer is the whole of what it opens, ``no-store`` as every page, so nothing of the
token outlives the response and a shared computer keeps no door to the student's submissions; each
submission's own page, whose address the list gives, updates itself.  The POST changes nothing, so it
needs no CSRF token: another site may make a browser send it but can read none of the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from grader.service import read
from grader.service.refusal import Refused


def router(pages: Any, form: Callable[[Request], Awaitable[dict[str, str]]]) -> APIRouter:
    """The routes over ``pages`` (``grader.service.pages.Pages``), reading a POST's fields with ``form``."""
    routes = APIRouter()
    config = pages.config

    def form_page(status: int = 200, assignment: str = "", error: str = "") -> Response:
        choices = list(config.assignments)
        chosen = assignment if assignment in config.assignments else choices[0] if choices else ""
        return pages.render("mine.html", status, assignments=choices, chosen=chosen, error=error, listing=None)

    @routes.get("/s")
    def own_form() -> Response:
        return form_page()

    @routes.post("/s")
    async def own_list(request: Request) -> Response:
        fields = await form(request)
        assignment, token = fields.get("assignment", ""), fields.get("token", "").strip()
        if not token:
            return form_page(401, assignment, "Paste the token your course gave you.")
        try:
            listing = await run_in_threadpool(read.own_submissions, config, pages.service.sessions, assignment, token)
        except Refused as refused:
            return form_page(refused.status, assignment, str(refused))
        return pages.render("mine.html", assignments=list(config.assignments), chosen=assignment, listing=listing)

    return routes
