"""A request the service will not take: the one exception every refusal of it raises, turned into
``{"error": {"code", "message"}}`` with its HTTP status by the API (``grader.service.app``)."""

from __future__ import annotations

from fastapi.responses import JSONResponse


class Refused(Exception):
    """``status`` and ``code`` (a slug) for the JSON error; the message is one sentence for the person
    who sent the request."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def error(status: int, code: str, message: str) -> JSONResponse:
    """The service's JSON error, for a :class:`Refused` and every other refusal of the API and the pages."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)
