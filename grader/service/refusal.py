"""A request the service will not take: the one exception every refusal of it raises, turned into
``{"error": {"code", "message"}}`` with its HTTP status by the API (``grader.service.app``)."""

from __future__ import annotations


class Refused(Exception):
    """``status`` and ``code`` (a slug) for the JSON error; the message is one sentence for the person
    who sent the request."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code
