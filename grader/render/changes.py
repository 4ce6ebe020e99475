"""What changed between two grades of one tree: the lines ``grader grade --watch`` prints under each
re-grade's table.

A case passes in a result when it is listed there with the verdict ``pass``.  A case now passes when
it passes in the later grade and did not in the earlier one (or was not listed there); it now fails
when it passed in the earlier grade and is listed in the later one with another verdict.  A case the
later grade does not list (a grading the grader could not finish lists none) is not said to fail:
its table already says why.  Like every renderer, this recomputes no score.
"""

from __future__ import annotations

from grader.render import fmt_points, one_line
from grader.render.terminal import FAIL_COLOR, PASS_COLOR, RESET
from grader.results import CaseOutcome, GradeResult, Verdict

CASES_SHOWN = 10  # per list: a change that breaks the whole matrix is a count, not a screenful
MESSAGE_WIDTH = 80


def render_changes(before: GradeResult, after: GradeResult, *, color: bool = False) -> str:
    """``Since the last grade: 5/10 -> 10/10 (+5)``, then the cases that now pass and those that now
    fail, each list in the later grade's order and cut at :data:`CASES_SHOWN`."""
    passed_before = {case.id for case in before.cases if case.verdict is Verdict.PASS}
    now_passing = [c for c in after.cases if c.verdict is Verdict.PASS and c.id not in passed_before]
    now_failing = [c for c in after.cases if c.verdict is not Verdict.PASS and c.id in passed_before]
    lines = [f"Since the last grade: {_score_change(before, after)}"]
    lines += _listed("now pass", now_passing, PASS_COLOR if color else "", describe=False)
    lines += _listed("now fail", now_failing, FAIL_COLOR if color else "", describe=True)
    if not now_passing and not now_failing:
        lines.append("  no case changed its verdict")
    return "\n".join(lines) + "\n"


def _score_change(before: GradeResult, after: GradeResult) -> str:
    delta = after.score - before.score
    change = "unchanged" if fmt_points(delta) == "0" else f"{'+' if delta > 0 else ''}{fmt_points(delta)}"
    return f"{_score(before)} -> {_score(after)} ({change})"


def _score(result: GradeResult) -> str:
    return f"{fmt_points(result.score)}/{fmt_points(result.max_score)}"


def _listed(heading: str, cases: list[CaseOutcome], paint: str, *, describe: bool) -> list[str]:
    if not cases:
        return []
    label = f"{paint}{heading}{RESET if paint else ''}"
    lines = [f"  {label} ({len(cases)}):"]
    for case in cases[:CASES_SHOWN]:
        why = f": {case.verdict.value}" if describe else ""
        if describe and case.message:
            why += f" ({one_line(case.message, MESSAGE_WIDTH)})"
        lines.append(f"    {case.id}{why}")
    if len(cases) > CASES_SHOWN:
        lines.append(f"    and {len(cases) - CASES_SHOWN} more")
    return lines
