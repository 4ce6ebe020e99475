"""GitHub Classroom: the result a grading step hands to ``autograding-grading-reporter@v1``.

The reporter sends Classroom ``sum(tests[].score)`` over ``max_score``: it adds the scores as
IEEE-754 doubles, left to right, uncapped, and prints the sum with JavaScript's number formatting.
For that sum to be exactly the grader's score (rounded to cents):

* there is one test per rubric item, scored with its earned points (bonus items add theirs);
* what the items do not show gets a row of its own: ``bonus cap`` (bonus earned over the cap),
  ``late penalty`` (negative; it also carries the floor at 0; worth 0 and saying so when the
  submission time is unknown) and, should the grader's total still
  differ from the rows, ``score adjustment``; a grading error adds a ``grader error`` row worth 0;
* the rows are rounded to cents so that the cents add up to the total (largest remainder: every
  row is within a cent of its exact value, and the total is never off);
* cents are not binary fractions (0.1 + 0.2 is 0.30000000000000004 in doubles), so when the
  reporter's sum would miss, the last non-zero row is moved by a few ulps.  It still rounds to the
  same cents, and the reporter never displays per-test scores.  That always works unless the last
  row cancels most of the sum (a late penalty over half the points): then a final ``rounding``
  row worth 0.00 (a few ulps) closes the gap, exactly, since the sum is within a few ulps of it.

The top-level status is ``pass`` when the score reaches ``max_score`` (with bonus it may exceed
it), ``error`` when the grader could not finish, else ``fail``; the reporter fails the job on both.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from itertools import cycle, islice
from pathlib import Path
from typing import Any

from grader.render import (
    append_github_file,
    earned_full,
    fmt_points,
    is_bonus,
    late_text,
    one_line,
    task_items,
    to_cents,
)
from grader.results import GradeResult, ItemResult, ItemStatus, Lateness
from grader.text import valid_utf8

MESSAGE_LIMIT = 300
NAME_LIMIT = 100
#: The reporter receives the result in one environment value; over 128 KiB the exec fails.
ENCODED_LIMIT = 64 * 1024
#: How many ulps either way the last row may move to make the reporter's double sum exact.
_ULP_SEARCH = 64


@dataclass(frozen=True)
class _Row:
    name: str
    status: str  # "pass" | "fail" | "error"
    points: float  # exact, before rounding to cents
    message: str


def render_classroom(result: GradeResult) -> dict[str, Any]:
    """The runner result object (``version: 1``) for ``result``; see the module docstring."""
    if not result.max_score > 0:
        # The reporter silently leaves such a runner out of the total: refuse instead.
        raise ValueError("GitHub Classroom needs a non-zero max_score; this result has none")
    rows = _rows(result)
    target = to_cents(result.score)
    scores = _reporter_exact(_apportion([row.points for row in rows], target), target)
    drift = target / 100 - _double_sum(scores)
    if drift:
        rows.append(_Row("rounding", "pass", drift, "Corrects the reporter's floating-point sum (0.00 points)."))
        scores.append(drift)
    payload = {
        "version": 1,
        "status": _status(result),
        "max_score": result.max_score,
        "tests": [_test(row, score) for row, score in zip(rows, scores, strict=True)],
    }
    size = len(encode_result(payload))
    if size > ENCODED_LIMIT:
        raise ValueError(f"Classroom result is {size} bytes in base64, over the {ENCODED_LIMIT}-byte budget")
    return payload


def encode_result(obj: Mapping[str, Any]) -> str:
    """Base64 (standard alphabet) of the UTF-8 JSON, on one line: the ``result`` step output."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return base64.b64encode(valid_utf8(text).encode("utf-8")).decode("ascii")


def write_step_output(encoded: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Set the step output ``result`` (append to ``$GITHUB_OUTPUT``); None outside Actions."""
    return append_github_file("GITHUB_OUTPUT", f"result={encoded}\n", environ)


def _status(result: GradeResult) -> str:
    if result.status == "error":
        return "error"
    return "pass" if to_cents(result.score) >= to_cents(result.max_score) else "fail"


def _rows(result: GradeResult) -> list[_Row]:
    rows = [
        _Row(f"{item.id}: {item.title}", "pass" if earned_full(item) else "fail", item.score, _message(item))
        for _, item in task_items(result)
    ]
    bonus_earned = math.fsum(item.score for task, item in task_items(result) if is_bonus(task, item))
    if to_cents(bonus_earned) > to_cents(result.bonus_score):
        rows.append(
            _Row(
                "bonus cap",
                "pass",
                result.bonus_score - bonus_earned,
                f"Bonus counts up to {fmt_points(result.bonus_score)} points; {fmt_points(bonus_earned)} were earned.",
            )
        )
    rest = result.score - math.fsum(row.points for row in rows)
    if result.late is not None:
        message = late_text(result) or ""
        if to_cents(rest) != -to_cents(result.late.points):
            floor = " (the score cannot go below 0)" if to_cents(result.score) == 0 else ""
            message += f"; {fmt_points(rest)} applied{floor}"
        rows.append(_Row("late penalty", "fail", rest, message))
    elif result.lateness is Lateness.UNKNOWN:
        rows.append(_Row("late penalty", "pass", 0.0, late_text(result) or ""))
    elif to_cents(rest):
        rows.append(
            _Row(
                "score adjustment",
                "pass" if rest > 0 else "fail",
                rest,
                "The grader's total differs from the sum of the rubric items by this much.",
            )
        )
    if result.status == "error":
        rows.append(_Row("grader error", "error", 0.0, result.error or "The grader could not finish."))
    return rows


def _message(item: ItemResult) -> str:
    if item.status is ItemStatus.PENDING_REVIEW:
        return "Pending instructor review: not scored yet."
    parts = [item.feedback] if item.feedback else []
    if item.failures:
        first = item.failures[0]
        failed = item.cases.total - item.cases.passed
        count = f"{failed} of {item.cases.total} cases failed" if item.cases.total else "Failed"
        detail = f": {first.message}" if first.message else ""
        parts.append(f"{count}, e.g. {first.id}: {first.verdict.value}{detail}")
    if item.findings:
        finding = item.findings[0]
        parts.append(f"{len(item.findings)} policy finding(s), e.g. {finding.file}:{finding.line} {finding.rule}")
    return " | ".join(parts)


def _test(row: _Row, score: float) -> dict[str, Any]:
    return {
        "name": one_line(row.name, NAME_LIMIT),
        "status": row.status,
        "score": int(score) if score.is_integer() else score,
        "message": one_line(row.message, MESSAGE_LIMIT),
        "test_code": "",
        "filename": "",
        "line_no": 0,  # 0 prints nothing; a missing line_no prints "line undefined"
        "duration": 0,  # ms; the result model has no per-item timing
    }


def _apportion(values: list[float], target: int) -> list[int]:
    """``values`` in cents summing to ``target`` (largest remainder: each within a cent)."""
    exact = [Decimal(repr(float(value))) * 100 for value in values]
    cents = [int(x.to_integral_value(rounding=ROUND_FLOOR)) for x in exact]
    short = target - sum(cents)
    # Rows whose exact value lies closest to the next cent in the needed direction move first.
    order = sorted(range(len(values)), key=lambda i: exact[i] - cents[i], reverse=short > 0)
    for i in islice(cycle(order), abs(short)):
        cents[i] += 1 if short > 0 else -1
    return cents


def _reporter_exact(cents: list[int], target: int) -> list[float]:
    """Scores (as doubles) whose left-to-right double sum is exactly ``target / 100``."""
    scores = [c / 100 for c in cents]
    goal = target / 100
    nonzero = [i for i, c in enumerate(cents) if c]
    if _double_sum(scores) == goal or not nonzero:
        return scores
    last = nonzero[-1]  # rows after it add 0.0, which changes no sum
    before = _double_sum(scores[:last])
    down = up = goal - before
    for _ in range(_ULP_SEARCH):
        for candidate in (down, up):
            if before + candidate == goal and to_cents(candidate) == cents[last]:
                scores[last] = candidate
                return scores
        down, up = math.nextafter(down, -math.inf), math.nextafter(up, math.inf)
    return scores  # no double works (heavy cancellation): render_classroom adds a rounding row


def _double_sum(values: list[float]) -> float:
    """The reporter's ``acc += score``, in the same order and the same arithmetic."""
    acc = 0.0
    for value in values:
        acc += value
    return acc
