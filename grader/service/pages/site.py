"""The pages' state and templates: :class:`Pages`, which the routes of ``grader.service.pages`` and
``grader.service.pages.actions`` share, apart from the routes so neither imports the other."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from grader.render import fmt_points
from grader.render.class_report import class_shape
from grader.service import actions as changes
from grader.service.pages import auth, data

HERE = Path(__file__).resolve().parent
LIVE_POLL_MS = 1000  # an open page's poll (body's data-poll-ms): a landed grade shows within it plus a fetch


def _when(epoch: float | None) -> str:
    if not epoch:
        return ""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value: float | None) -> str:
    if value is None:
        return "unknown (nothing graded yet)"
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["points"] = fmt_points
    env.filters["seconds"] = _seconds
    env.filters["part"] = lambda value: quote(str(value), safe="")
    env.filters["query"] = lambda values: urlencode(values)
    env.globals["live_poll_ms"] = LIVE_POLL_MS
    return env


class Pages:
    """The pages' state: templates, sessions, the results cache and the last class shape rendered."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.config = service.config
        self.sessions = auth.Sessions(service.instructor_token, service.sessions)
        self.cache = data.ResultCache(service.config)
        self.env = _environment()
        self._shapes: dict[str, tuple[str, str]] = {}  # assignment -> (key, html)
        self.similarity = changes.SimilarityRuns(service.config)  # each assignment's latest similarity check

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(name).render(**context), status_code=status)

    def shape(self, assignment: str, view: data.ClassView) -> str:
        """The class's histograms and pass rates, rendered again only when a latest grading changed."""
        cached = self._shapes.get(assignment)
        if cached is None or cached[0] != view.graded_key:
            cached = self._shapes[assignment] = (view.graded_key, class_shape(view.graded))
        return cached[1]
