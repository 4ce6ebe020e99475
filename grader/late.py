"""The late policy applied: days late after the grace period, the penalty, and ``--deadline``.

``grader.scoring.score`` takes the penalty off the total; ``grade``, ``batch`` and ``rescore`` read
``--deadline`` the one way :func:`under_deadline_option` does.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta, timezone

from grader.errors import UserError
from grader.results import Lateness, LatePenalty
from grader.rubric import LatePolicy, Rubric
from grader.submission_time import TIME_FORMS, parse_time


def late_penalty(policy: LatePolicy | None, submitted_at: datetime | None, total: float) -> LatePenalty | None:
    """Days late after the grace period, rounded up; ``None`` when there is no deadline or time."""
    if policy is None or policy.deadline is None or submitted_at is None:
        return None
    if submitted_at.tzinfo is None:
        submitted_at = submitted_at.replace(tzinfo=timezone.utc)  # times given without a zone are UTC
    overdue = submitted_at - policy.deadline - timedelta(minutes=policy.grace_minutes)
    days = max(0, math.ceil(overdue / timedelta(days=1)))
    percent = min(days * policy.penalty_percent_per_day, policy.cap_percent)
    return LatePenalty(days_late=days, percent=percent, points=round(total * percent / 100, 2))


def lateness(policy: LatePolicy | None, late: LatePenalty | None) -> Lateness:
    """What :func:`late_penalty` decided: with a deadline but no penalty computed, the time was unknown
    and nobody may silently call that on time."""
    if policy is None or policy.deadline is None:
        return Lateness.NO_DEADLINE
    if late is None:
        return Lateness.UNKNOWN
    return Lateness.LATE if late.days_late > 0 else Lateness.ON_TIME


def under_deadline_option(rubric: Rubric, option: str | None) -> Rubric:
    """``rubric`` under a ``--deadline`` option, the one reading of it for ``grade`` (either backend),
    ``batch`` and ``rescore``: None (not given) keeps the rubric's deadline; an empty value is refused,
    since it reads as "no deadline" to one person and "keep the rubric's" to another."""
    if option is None:
        return rubric
    if not option.strip():
        raise UserError(
            f"--deadline is empty: give a time ({TIME_FORMS}), or leave the option out to keep the rubric's deadline"
        )
    return with_deadline(rubric, parse_time(option, "--deadline"))


def with_deadline(rubric: Rubric, deadline: datetime) -> Rubric:
    """``rubric`` with its late policy's deadline replaced (``grader grade --deadline``)."""
    if rubric.late is None:
        raise UserError(f"{rubric.source}: --deadline needs a `late:` section (penalty per day, cap) in the rubric")
    return dataclasses.replace(rubric, late=dataclasses.replace(rubric.late, deadline=deadline))
