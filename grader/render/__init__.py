"""Renderers of :class:`grader.results.GradeResult`, one module per output.

Every renderer is a pure function of the result (plus options) and never recomputes a score.
The conventions they share live here so that the outputs agree with each other: points are
shown rounded half-up to cents, an item "passed" by the same rule everywhere, status labels
are the same words in the terminal and in ``summary.md``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from grader.results import (
    FILE_CHOSEN,
    FILE_IN_SUBFOLDER,
    ChosenFile,
    GradeResult,
    ItemResult,
    ItemStatus,
    Lateness,
    SubmissionInfo,
    TaskResult,
    TimeSource,
)

#: Plain-text markers (no emoji: they render inconsistently in terminals and CI logs).
STATUS_LABELS: dict[ItemStatus, str] = {
    ItemStatus.PASSED: "PASS",
    ItemStatus.PARTIAL: "PARTIAL",
    ItemStatus.FAILED: "FAIL",
    ItemStatus.PENDING_REVIEW: "PENDING REVIEW",
    ItemStatus.AUTO_CHECKED: "AUTO-CHECKED",
    ItemStatus.MANUAL: "MANUAL",
}


def to_cents(points: float) -> int:
    """``points`` in whole cents, rounded half-up from the number's shortest repr.

    Going through ``repr`` rounds what the number *says* (2.675 -> 268) rather than its binary
    approximation (2.67499999...), so every renderer rounds a score to the same cents.
    """
    return int((Decimal(repr(float(points))) * 100).to_integral_value(rounding=ROUND_HALF_UP))


def fmt_points(points: float) -> str:
    """``87.5``, ``100``, ``8.33``: at most two decimals, no trailing zeros."""
    cents = to_cents(points)
    whole, frac = divmod(abs(cents), 100)
    sign = "-" if cents < 0 else ""
    return f"{sign}{whole}" if frac == 0 else f"{sign}{whole}.{frac:02d}".rstrip("0")


def task_items(result: GradeResult) -> Iterator[tuple[TaskResult, ItemResult]]:
    """Items with their task, in rubric order (an item is bonus when it or its task is)."""
    for task in result.tasks:
        for item in task.items:
            yield task, item


def is_bonus(task: TaskResult, item: ItemResult) -> bool:
    return task.bonus or item.bonus


def earned_full(item: ItemResult) -> bool:
    """Whether an item counts as passed on platforms that only know passed/failed.

    Auto-checked and manual items carry no pass/fail status of their own, so their points decide.
    """
    if item.status is ItemStatus.PASSED:
        return True
    if item.status in (ItemStatus.AUTO_CHECKED, ItemStatus.MANUAL):
        return to_cents(item.score) >= to_cents(item.max_score)
    return False


def score_line(result: GradeResult) -> str:
    """``Score: 87.5/100 (+2 bonus, -8.75 late)``: the last line of every human-readable report."""
    extras = []
    if to_cents(result.bonus_score):
        extras.append(f"+{fmt_points(result.bonus_score)} bonus")
    if result.late is not None and to_cents(result.late.points):
        extras.append(f"-{fmt_points(result.late.points)} late")
    suffix = f" ({', '.join(extras)})" if extras else ""
    return f"Score: {fmt_points(result.score)}/{fmt_points(result.max_score)}{suffix}"


#: Where a submission time came from, as the reports say it (``submitted 2025-03-01T... (push)``).
TIME_SOURCE_LABELS: dict[TimeSource, str] = {
    TimeSource.FLAG: "given to the grader",
    TimeSource.ROSTER: "from the roster",
    TimeSource.PUSH: "the push, as the platform recorded it",
    TimeSource.COMMIT: "the commit's own date, trusted by the instructor",
    TimeSource.UNKNOWN: "unknown",
}
UNKNOWN_LATENESS = (
    "submission time unknown (no trusted time was given, and a commit's date is set by its author): "
    "no late penalty applied; the instructor decides"
)


def late_text(result: GradeResult) -> str | None:
    """The late penalty in words, or why none could be computed; None when lateness is not in question."""
    if result.lateness is Lateness.UNKNOWN:
        return UNKNOWN_LATENESS
    if result.late is None:
        return None
    late = result.late
    days = "day" if late.days_late == 1 else "days"
    return f"{late.days_late} {days} late: -{fmt_points(late.percent)}% (-{fmt_points(late.points)} points)"


def chosen_text(chosen: ChosenFile) -> str:
    """The flag on a student file graded from a subfolder or chosen over others, in words."""
    why = []
    if FILE_IN_SUBFOLDER in chosen.flags:
        why.append("from a subfolder")
    if FILE_CHOSEN in chosen.flags:
        why.append(f"chosen over {', '.join(chosen.over)}")
    return f"Graded {chosen.file} from {chosen.found}: {' and '.join(why)} (see the note on it)"


def submitted_text(sub: SubmissionInfo) -> str | None:
    """``submitted 2025-03-01T12:00:00+00:00 (the push, as the platform recorded it)``; None when unknown."""
    if sub.submitted_at is None:
        return None
    return f"submitted {sub.submitted_at} ({TIME_SOURCE_LABELS[sub.submitted_at_source]})"


def isolation_off(result: GradeResult) -> dict[str, str]:
    """Isolation layers that were not on, layer -> why (the part after ``off:``).  A layer that is
    on may say how (``on: the instructor's secret``)."""
    return {
        layer: state.partition(":")[2].strip() or "no reason given"
        for layer, state in result.isolation.items()
        if state.partition(":")[0] != "on"
    }


def one_line(text: str, limit: int) -> str:
    """Whitespace collapsed to single spaces, cut to ``limit`` characters with an ellipsis."""
    flat = re.sub(r"\s+", " ", text).strip()
    if len(flat) <= limit:
        return flat
    if limit <= 0:
        return ""
    return flat[: limit - 1].rstrip() + "…"


def append_github_file(variable: str, text: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append ``text`` to the file GitHub Actions names in ``$<variable>``; None outside Actions."""
    target = (os.environ if environ is None else environ).get(variable)
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text if text.endswith("\n") else text + "\n")
    return path
