"""The table ``grader grade`` prints by default: compact, aligned, plain text.

Colour only marks the status words and the score line, and only on a terminal with ``NO_COLOR``
unset or empty (https://no-color.org), so logs and pipes get plain text.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TextIO

from grader.render import (
    STATUS_LABELS,
    chosen_text,
    fmt_points,
    isolation_off,
    late_text,
    one_line,
    score_line,
)
from grader.results import GradeResult, ItemStatus

TITLE_WIDTH = 40
FINDINGS_SHOWN = 5

RESET = "\033[0m"
_BOLD = "\033[1m"
PASS_COLOR = "\033[32m"
FAIL_COLOR = "\033[31m"
_STATUS_COLORS = {
    ItemStatus.PASSED: PASS_COLOR,
    ItemStatus.PARTIAL: "\033[33m",
    ItemStatus.FAILED: FAIL_COLOR,
    ItemStatus.PENDING_REVIEW: "\033[36m",
    ItemStatus.AUTO_CHECKED: "\033[33m",
    ItemStatus.MANUAL: "\033[35m",
}


def use_color(stream: TextIO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    out = sys.stdout if stream is None else stream
    return not env.get("NO_COLOR") and out.isatty()


def render_terminal(result: GradeResult, *, color: bool | None = None) -> str:
    """The table, then late penalty, problems, findings, isolation, error, and the score line last.

    ``color=None`` decides by :func:`use_color` on ``sys.stdout``.
    """
    paint = use_color() if color is None else color
    header = ["Item", "Title", "Cases", "Points", "Status"]
    table: list[tuple[list[str], ItemStatus | None]] = [(header, None)]
    for task in result.tasks:
        title = task.title + (" (bonus)" if task.bonus else "")
        points = f"{fmt_points(task.score)}/{fmt_points(task.max_score)}"
        table.append(([task.id, one_line(title, TITLE_WIDTH), "", points, ""], None))
        for item in task.items:
            title = item.title + (" (bonus)" if item.bonus and not task.bonus else "")
            table.append(
                (
                    [
                        f"  {item.id}",
                        one_line(title, TITLE_WIDTH),
                        f"{item.cases.passed}/{item.cases.total}" if item.cases.total else "",
                        f"{fmt_points(item.score)}/{fmt_points(item.max_score)}",
                        STATUS_LABELS[item.status],
                    ],
                    item.status,
                )
            )
    widths = [max(len(cells[col]) for cells, _ in table) for col in range(5)]
    lines = [f"Assignment {result.assignment}"]
    for cells, status in table:
        item_id, title, cases, points, label = cells
        if paint and status is not None:
            label = f"{_STATUS_COLORS[status]}{label}{RESET}"
        lines.append(
            f"{item_id.ljust(widths[0])}  {title.ljust(widths[1])}  {cases.rjust(widths[2])}  "
            f"{points.rjust(widths[3])}  {label}".rstrip()
        )
    lines += _notes(result)
    total = score_line(result)
    lines.append(f"{_BOLD}{total}{RESET}" if paint else total)
    return "\n".join(lines) + "\n"


def _notes(result: GradeResult) -> list[str]:
    notes = [""]
    late = late_text(result)
    if late:
        notes.append(f"Late: {late}")
    notes += [f"Submission problem: {one_line(problem, 100)}" for problem in result.submission.problems]
    notes += [f"Flag: {one_line(chosen_text(c), 100)}" for c in result.submission.chosen]
    notes += [f"Note (not scored): {one_line(note, 100)}" for note in result.notes]
    if result.findings:
        notes.append(f"Policy findings ({len(result.findings)}):")
        shown = result.findings[:FINDINGS_SHOWN]
        notes += [f"  {f.file}:{f.line} {f.rule}: {one_line(f.message, 80)}" for f in shown]
        if len(result.findings) > FINDINGS_SHOWN:
            notes.append(f"  and {len(result.findings) - FINDINGS_SHOWN} more (see summary.md)")
    off = isolation_off(result)
    if off:
        notes.append("Isolation off: " + ", ".join(f"{layer} ({why})" for layer, why in sorted(off.items())))
    if result.status == "error":
        notes.append(f"Grader error: {one_line(result.error or 'unknown error', 200)}")
    return notes
