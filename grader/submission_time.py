"""When a submission was handed in, and who says so.

Lateness rests on a time the student cannot set.  A git commit's dates are written by whoever makes
the commit (``GIT_COMMITTER_DATE``, ``git commit --date``, a clock set back), so a commit dated
before the deadline and pushed three weeks later looks on time.  The sources, most trusted first
(:class:`~grader.results.TimeSource`):

1. ``flag``: ``grader grade --submitted-at``, given by whoever runs the grader;
2. ``roster``: the ``submitted_at`` column of a ``grader batch`` CSV roster;
3. ``push``: ``grader grade --pushed-at``, the time the platform's server recorded the push (the
   Classroom workflow passes ``github.event.repository.pushed_at``);
4. ``commit``: the committer date, and only with ``--trust-commit-time``.

With none of them the time is ``unknown``: no late penalty is applied, and every report and the
gradebook say so, for an instructor to decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from grader.errors import UserError
from grader.results import TimeSource


@dataclass(frozen=True)
class SubmittedAt:
    """A submission time (ISO 8601, ``None`` when unknown) and where it came from."""

    value: str | None
    source: TimeSource


UNKNOWN = SubmittedAt(None, TimeSource.UNKNOWN)
#: the forms :func:`parse_time` reads, as every option and message that takes a time says them
TIME_FORMS = "ISO 8601 (without a zone: UTC) or Unix seconds"


def parse_time(value: str, where: str) -> datetime:
    """An ISO 8601 time (``Z`` allowed; without a zone, UTC) or whole Unix seconds, as an aware datetime.

    Unix seconds are accepted because that is how GitHub's push event reports ``pushed_at``.
    """
    text = value.strip()
    if text.endswith(("Z", "z")):  # Python 3.10's fromisoformat knows only numeric offsets
        text = text[:-1] + "+00:00"
    try:
        if text.isdigit():
            return datetime.fromtimestamp(int(text), timezone.utc)
        when = datetime.fromisoformat(text)
    except (ValueError, OverflowError, OSError):
        raise UserError(
            f"{where}: {value!r} is not a time (ISO 8601 such as 2025-03-01T23:59:00+01:00, or Unix seconds)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def given(
    submitted_at: str | None, source: TimeSource = TimeSource.FLAG, pushed_at: str | None = None
) -> SubmittedAt | None:
    """The most trusted of the times given on the command line (``--submitted-at`` wins over
    ``--pushed-at``), normalised to ISO 8601; ``None`` when neither was given."""
    if submitted_at:
        option = "--submitted-at" if source is TimeSource.FLAG else "the roster's submitted_at"
        return SubmittedAt(parse_time(submitted_at, option).isoformat(), source)
    if pushed_at:
        return SubmittedAt(parse_time(pushed_at, "--pushed-at").isoformat(), TimeSource.PUSH)
    return None


def resolve(given: SubmittedAt | None, committed_at: str | None, trust_commit_time: bool) -> SubmittedAt:
    """The submission time to grade with: what was given, else the commit's if trusted, else unknown."""
    if given is not None:
        return given
    if trust_commit_time and committed_at:
        return SubmittedAt(committed_at, TimeSource.COMMIT)
    return UNKNOWN
