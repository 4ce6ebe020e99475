"""The items a person scores: a deliverable (a diagram), written answers, a manual item, and code
answered in words where code was asked (``AssignmentPack.review``).

Their points are an instructor's (``grader.manual``'s scores, whose contract is checked here), but
for what is checked automatically: a diagram's file earns its points provisionally, and written
answers with a form are marked.  ``grader.scoring`` scores every other item and computes the one
total.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from grader.deliverables import answer_sections, check_diagram, check_written, find_deliverable
from grader.errors import UserError
from grader.manual import ManualScores
from grader.results import ItemResult, ItemStatus
from grader.rubric import CasesScoring, DeliverableScoring, Item, ManualScoring, Rubric, WrittenScoring, matches

if TYPE_CHECKING:
    from grader.pack import AssignmentPack


def rubric_pack(rubric: Rubric) -> AssignmentPack | None:
    """The rubric's pack, or None where none is installed (its hooks are then not called)."""
    from grader.pack import load_pack

    try:
        return load_pack(rubric.assignment.pack)
    except UserError:  # a rubric validated against case ids it was given, with no pack installed
        return None


#: How much of an answer in words an item's feedback quotes for the instructor.
QUOTED_CHARS = 2000


def _in_words(rubric: Rubric, root: Path) -> dict[str, str]:
    """Cases item id -> the student's words, for the items every case of which is of a kind the pack
    found answered in words where code was asked (``AssignmentPack.review``)."""
    pack = rubric_pack(rubric)
    if pack is None or pack.review is None:
        return {}
    words = pack.review(root)
    if not words:
        return {}
    kind_of = {case.name: case.kind for case in pack.cases()}
    found: dict[str, str] = {}
    for item in rubric.items():
        if not isinstance(item.scoring, CasesScoring):
            continue
        patterns = tuple(p for c in item.scoring.components if not c.advisory for p in c.match)
        kinds = sorted(kind or "" for kind in {kind_of.get(cid) for cid in rubric.case_ids if matches(patterns, cid)})
        if kinds and all(kind in words for kind in kinds):  # the kinds of one question (A5's Q8: two)
            found[item.id] = words[kinds[0]]
    return found


def scorable(rubric: Rubric, in_words: Collection[str] = ()) -> dict[str, Item]:
    """The items a manual score may set, by id: deliverable, written and manual items, and the cases
    items ``in_words`` (code answered in words, :func:`_in_words`)."""
    return {
        item.id: item
        for item in rubric.items()
        if isinstance(item.scoring, DeliverableScoring | WrittenScoring | ManualScoring) or item.id in in_words
    }


def check_manual(items: dict[str, Item], manual: ManualScores) -> ManualScores:
    """The manual-score contract: only ``items`` (:func:`scorable`), each within 0..its points.  A typo
    must not silently leave an item at its automatic score.  The batch's file and the service's pages
    are checked here alike."""
    for item_id, points in manual.scores.items():
        if item_id not in items:
            raise UserError(
                f"manual score for {item_id!r}: not a deliverable, written or manual item, nor code answered in words"
            )
        if not 0 <= points <= items[item_id].points:
            raise UserError(f"manual score for {item_id}: {points:g} is outside 0..{items[item_id].points:g}")
    return manual


class ManualItems:
    """The items of one grading a person scores, with the instructor's scores for them."""

    def __init__(self, rubric: Rubric, root: Path, manual: ManualScores) -> None:
        self.rubric = rubric
        self.root = root  # the submission's files: the deliverables
        self.in_words = _in_words(rubric, root)  # item id -> the words an instructor reads instead of code
        self.manual = check_manual(scorable(rubric, self.in_words), manual)

    def read_by_instructor(self, item: Item, result: ItemResult) -> None:
        """Code asked for and words given: the item waits for an instructor, who reads them here."""
        words = self.in_words[item.id]
        quoted = words[:QUOTED_CHARS] + (" [...]" if len(words) > QUOTED_CHARS else "")
        lines = [
            "answered in words where code was asked: an instructor reads them and scores this item",
            "  > " + quoted.replace("\n", "\n  > "),
        ]
        result.status, result.manual = ItemStatus.PENDING_REVIEW, True
        self.instructors_score(item, result, lines)
        result.feedback = "\n".join([*lines, result.feedback])

    def said(self, deliverable: str, question: str) -> bool:
        """Whether the deliverable holds any words under the question's heading."""
        path = find_deliverable(self.root, self.rubric.deliverables[deliverable].any_of)
        if path is None:
            return False
        pack = rubric_pack(self.rubric)
        if pack is not None and pack.words is not None:  # as the pack reads it: code and a pasted question say nothing
            return bool(pack.words(path, question).split())
        return bool(answer_sections(path.read_text(encoding="utf-8", errors="replace")).get(question, "").split())

    def instructors_score(self, item: Item, result: ItemResult, lines: list[str]) -> None:
        """An instructor's score for the item, when the manual scores hold one, said first."""
        if item.id in self.manual.scores:
            result.score, result.status, result.manual = self.manual.scores[item.id], ItemStatus.MANUAL, True
            lines.insert(0, f"scored by an instructor: {result.score:g}/{item.points:g}")
            if self.manual.comments.get(item.id):
                lines.insert(1, f"instructor's comment: {self.manual.comments[item.id]}")

    def item(self, item: Item, scoring: DeliverableScoring | WrittenScoring | ManualScoring) -> ItemResult:
        # manual: the points are (or will be) an instructor's, except for auto-checked Markdown answers.
        result = ItemResult(
            item.id, item.title, 0.0, item.points, ItemStatus.PENDING_REVIEW, bonus=item.bonus, manual=True
        )
        lines: list[str] = []
        if isinstance(scoring, DeliverableScoring):
            ok, message = check_diagram(self.root, self.rubric.deliverables[scoring.deliverable].any_of)
            if ok:  # awarded provisionally: a real file earns the points until a reviewer says otherwise
                result.score = item.points
                lines.append(f"{message}; its {item.points:g} points are provisional until an instructor reviews it")
            else:
                result.status = ItemStatus.FAILED
                lines.append(message)
        elif isinstance(scoring, WrittenScoring):
            candidates = self.rubric.deliverables[scoring.deliverable].any_of
            written = check_written(self.root, candidates, scoring.questions)
            lines.append(written.message)
            lines += [f"{q.id} ({q.points:g}/{q.max_points:g}): {q.feedback}" for q in written.questions]
            if written.file is None:
                result.status = ItemStatus.FAILED
            elif not written.pending:
                result.score = round(sum(q.points for q in written.questions), 2)
                if not any(q.provisional for q in written.questions):  # else explanations wait for review
                    result.status, result.manual = ItemStatus.AUTO_CHECKED, False
        elif scoring.answer is not None and not self.said(*scoring.answer):
            result.status = ItemStatus.FAILED
            lines.append(f"no answer found under a '## {scoring.answer[1]}' heading")
        else:
            lines.append(f"to be scored by an instructor{': ' + scoring.instructions if scoring.instructions else ''}")
        self.instructors_score(item, result, lines)
        result.feedback = "\n".join(lines)
        return result
