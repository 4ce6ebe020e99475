"""Gradescope: the ``/autograder/results/results.json`` of one submission.

* ``score`` is the grader's total.  It overrides the sum of the tests on Gradescope, so the late
  penalty and the bonus cap need no test of their own; the late penalty is stated in ``output``.
* One test per rubric item.  Bonus items are tests with ``max_score`` 0 and their earned points as
  ``score``: Gradescope takes the points available from the assignment's settings, and a bonus
  item shown as "2/2" would read as part of them.
* ``status`` is ``passed`` only for full marks (auto-checked and manual items: points reach the
  maximum); pending-review items are ``failed`` for now and say why in their output.
* Outputs are Markdown (``output_format`` and ``test_output_format``), so quoted lines of
  findings render as code blocks.
"""

from __future__ import annotations

from typing import Any

from grader.render import earned_full, is_bonus, task_items
from grader.render.markdown import item_markdown, render_markdown
from grader.results import GradeResult, ItemResult, TaskResult

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


def render_gradescope(
    result: GradeResult, *, visibility: str = "visible", stdout_visibility: str = "hidden"
) -> dict[str, Any]:
    """``results.json`` for Gradescope.  The grader's stdout stays hidden by default: it is for staff."""
    for value in (visibility, stdout_visibility):
        if value not in VISIBILITIES:
            raise ValueError(f"visibility must be one of {', '.join(VISIBILITIES)}, not {value!r}")
    return {
        "score": result.score,
        "execution_time": round(result.timings.get("total", sum(result.timings.values()))),  # seconds
        "output": render_markdown(result, details=False),
        "output_format": "md",
        "test_output_format": "md",
        "visibility": visibility,
        "stdout_visibility": stdout_visibility,
        "tests": [_test(task, item, visibility) for task, item in task_items(result)],
    }


def _test(task: TaskResult, item: ItemResult, visibility: str) -> dict[str, Any]:
    bonus = is_bonus(task, item)
    tags = list(dict.fromkeys([task.id] + ["bonus"] * bonus + ["manual"] * item.manual))
    return {
        "score": item.score,
        "max_score": 0 if bonus else item.max_score,
        "status": "passed" if earned_full(item) else "failed",
        "name": f"{item.id}: {item.title}" + (" (bonus)" if bonus else ""),
        "output": item_markdown(item, bonus=bonus),
        "visibility": visibility,
        "tags": tags,
    }
