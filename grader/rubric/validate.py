"""``grader rubric validate FILE``: every problem of a rubric, or what it grades, in one line."""

from __future__ import annotations

import argparse
import sys

from grader.errors import UserError
from grader.rubric.load import load_rubric


def main_validate(args: argparse.Namespace) -> int:
    """``grader rubric validate FILE``: one ``FILE:LINE:COL: reason`` line per problem, or a summary."""
    try:
        rubric = load_rubric(args.file)
    except UserError as exc:
        print(exc, file=sys.stderr)
        return 1
    items = [item for task in rubric.tasks for item in task.items]
    line = f"ok: {rubric.assignment.id}, {len(items)} items, {rubric.max_score:g} points"
    if rubric.bonus:
        line += f" (+ {len(rubric.bonus.items)} bonus items, capped at {rubric.bonus.cap:g})"
    print(line)
    return 0
