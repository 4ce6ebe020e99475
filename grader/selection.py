"""``grader grade -k EXPR``: only the matching visible cases, for a student's quick loop.

The expression is pytest's ``-k`` grammar (``and``, ``or``, ``not``, parentheses; each word matches
as a case-insensitive substring of the case id, e.g. ``allreduce and ws4``), evaluated by pytest's
own parser so that it means exactly what it means to ``pytest -k``.  Only a rubric that shows case
ids to students allows it: with hidden ids, choosing cases by id would reveal them.  A selected run
scores only what ran, so its result carries a note that the score is partial.
"""

from __future__ import annotations

from _pytest.mark.expression import Expression

try:  # pytest < 8 has its own error class; later ones raise SyntaxError
    from _pytest.mark.expression import ParseError  # type: ignore[attr-defined]
except ImportError:
    ParseError = SyntaxError

from grader.errors import UserError
from grader.rubric import Rubric


def select(rubric: Rubric, expression: str) -> list[str]:
    """The rubric's case ids that ``expression`` matches; a bad expression or no match is the user's error."""
    if rubric.visibility.hidden:
        raise UserError("-k: this rubric hides case ids from students, so cases cannot be chosen by id")
    try:
        compiled = Expression.compile(expression)
    except (ParseError, SyntaxError) as exc:
        raise UserError(f"-k {expression!r}: {exc}") from None
    chosen = [cid for cid in rubric.case_ids if compiled.evaluate(_Matcher(cid))]
    if not chosen:
        raise UserError(f"-k {expression!r} matches no case; case ids look like {rubric.case_ids[0]!r}")
    return chosen


class _Matcher:
    """pytest's ``-k`` matching for one case id: a word matches as a case-insensitive substring."""

    def __init__(self, case_id: str) -> None:
        self.case_id = case_id.lower()

    def __call__(self, word: str, /, **kwargs: str | int | bool | None) -> bool:
        return not kwargs and word.lower() in self.case_id


def partial_note(expression: str, chosen: int, rubric: Rubric) -> str:
    """What every output says about a selected run."""
    return (
        f"Partial score: {chosen} of {len(rubric.case_ids)} cases ran (-k {expression!r}), the rest are not_run; "
        "grade without -k for your real score."
    )
