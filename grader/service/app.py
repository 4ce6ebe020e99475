"""``grader serve --config service.yaml``: the HTTP API, thin routes over ``intake`` and ``read``.

Every error is ``{"error": {"code": "<slug>", "message": "<one sentence>"}}`` with a 4xx or 5xx
status; a request that fails in the service's own code is a 500 of that shape and the service stays up.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from grader.service import intake, leftovers, read
from grader.service.config import ServiceConfig, load_config
from grader.service.db import connect
from grader.service.oidc import Verifier
from grader.service.refusal import Refused, error
from grader.service.tokens import bearer, check_instructor, secret_file
from grader.service.workers import Engine

log = logging.getLogger("grader.service")


@dataclass
class Service:
    """What every request reads: the configuration, the database, the token checks."""

    config: ServiceConfig
    sessions: sessionmaker[Session]
    verifier: Verifier | None
    instructor_token: str
    ready: bool = False


def open_service(config: ServiceConfig) -> Service:
    """The database migrated, the instructor's token read (made on first start) and what a killed run
    left in ``state_dir`` swept (``grader.service.leftovers``)."""
    config.state_dir.mkdir(parents=True, exist_ok=True)
    sessions = sessionmaker(connect(config.database), expire_on_commit=False)
    leftovers.sweep(config, sessions)
    verifier = Verifier(config.oidc) if config.oidc else None
    return Service(config, sessions, verifier, secret_file(config.instructor_token_file))


async def _body(request: Request, limit: int) -> bytes:
    """The request's body, refused past ``limit`` bytes without reading the rest."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused(413, "too_large", f"the bundle is over the {limit >> 20} MiB limit")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Refused(413, "too_large", f"the bundle is over the {limit >> 20} MiB limit")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(service: Service, engine: Engine | None = None) -> FastAPI:
    """The API over ``service``; with ``engine``, its workers grade while the app runs."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with engine.running() if engine is not None else contextlib.nullcontext():
            service.ready = True
            try:
                yield
            finally:
                service.ready = False

    app = FastAPI(title="dist-grader service", lifespan=lifespan, docs_url=None, redoc_url=None)
    config = service.config

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        return error(exc.status, exc.code, str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error(400, "bad_request", "the request is not one this API takes")

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("request failed: %s %s", request.method, request.url.path)
        return error(500, "internal_error", "the service failed on this request; it has been logged")

    @app.get("/healthz")
    async def healthz() -> Any:
        if not service.ready:
            return error(503, "starting", "the service is not taking submissions yet")
        return {"ok": True}

    @app.post("/api/v1/assignments/{assignment}/submissions", status_code=202)
    async def submit(assignment: str, request: Request) -> Any:
        try:
            body = await _body(request, config.body_bytes)
            authorization = request.headers.get("authorization")
            row = await run_in_threadpool(
                intake.receive, config, service.verifier, service.sessions, assignment, authorization, body
            )
        except Refused as refused:  # the reason's code, never the token
            log.info("submission to %r refused: %d %s", assignment, refused.status, refused.code)
            raise
        log.info("submission %s received: %s/%s commit %s", row.id, row.assignment, row.student, row.commit)
        return JSONResponse(read.accepted(row), status_code=202)

    @app.get("/api/v1/assignments/{assignment}/submissions")
    async def own_submissions(assignment: str, request: Request) -> Any:
        """The caller's own submissions: the course token that submits them (POST, above) lists them."""
        token = bearer(request.headers.get("authorization"))
        return await run_in_threadpool(read.own_submissions, config, service.sessions, assignment, token)

    @app.get("/api/v1/submissions/{sid}")
    async def submission(sid: str) -> Any:
        row = await run_in_threadpool(read.find, service.sessions, sid)
        return await run_in_threadpool(read.document, config, row)

    @app.get("/api/v1/submissions/{sid}/report.html")
    async def report(sid: str) -> Any:
        row = await run_in_threadpool(read.find, service.sessions, sid)
        return FileResponse(read.report(config, row), media_type="text/html; charset=utf-8")

    @app.get("/api/v1/assignments/{assignment}/gradebook.csv")
    async def gradebook(assignment: str, request: Request) -> Any:
        check_instructor(service.instructor_token, request.headers.get("authorization"))
        text = await run_in_threadpool(read.gradebook, config, service.sessions, assignment)
        return PlainTextResponse(text, media_type="text/csv; charset=utf-8")

    from grader.service import pages  # the instructor's and students' pages over the same functions

    pages.install(app, service)
    return app


def main(args: argparse.Namespace) -> int:
    """``grader serve --config service.yaml``: serve until SIGINT or SIGTERM."""
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # a line per plugin on every start otherwise
    config = load_config(args.config)
    service = open_service(config)
    engine = Engine(config, service.sessions)
    app = create_app(service, engine)
    print(
        f"grader serve: http://{config.host}:{config.port} ({len(config.assignments)} assignments, "
        f"state in {config.state_dir}, instructor token in {config.instructor_token_file})",
        file=sys.stderr,
    )
    uvicorn.run(app, host=config.host, port=config.port, log_level="info")
    return 0
