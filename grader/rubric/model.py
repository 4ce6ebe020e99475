"""The rubric as the engine reads it: typed, frozen dataclasses, and the case patterns items match.

Case patterns are globs over JUnit testcase names in which only ``*`` (any run of characters) and
``?`` (one character) are special.  ``fnmatch`` would read ``[ws4-...]`` as a character class, and
every matrix id contains brackets, so here brackets are literal: ``test_broadcast[*`` means "every
``test_broadcast`` case" and does not match ``test_broadcast_inplace[ws4-src1]``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grader.limits import Limits
from grader.runtimes.torchdist.policy import Policy

# --------------------------------------------------------------------------- case patterns


_GLOB_SPECIAL = {"*": ".*", "?": "."}


@functools.lru_cache(maxsize=512)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(_GLOB_SPECIAL.get(ch) or re.escape(ch) for ch in pattern), re.DOTALL)


def matches(patterns: Iterable[str], case_id: str) -> bool:
    """Whether ``case_id`` matches any of ``patterns`` (globs where only ``*`` and ``?`` are special)."""
    return any(_glob_regex(p).fullmatch(case_id) for p in patterns)


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Assignment:
    id: str
    title: str
    pack: str = ""  # the assignment pack whose matrix the rubric grades (grader.pack.load_pack); "" = id

    def __post_init__(self) -> None:
        if not self.pack:
            object.__setattr__(self, "pack", self.id)


@dataclass(frozen=True)
class Deliverable:
    """A non-code file the student hands in; the first of ``any_of`` that exists is used."""

    name: str
    any_of: tuple[str, ...]


@dataclass(frozen=True)
class HandIn:
    """How the hand-in is recognised when no file has the name the rubric gives it: students hand in
    what Colab or Jupyter saved (``Copy of ....ipynb``, ``... (1).ipynb``, a ``.py`` export).  Among
    the files with a student file's suffix, the one that defines (code) or heads a section with
    (Markdown) the most of ``holds``; ``given`` are the handout's own files (A4's ``utils.py``),
    never taken for it."""

    holds: tuple[str, ...]
    given: tuple[str, ...] = ()


@dataclass(frozen=True)
class Advice:
    """A check of a deliverable that is reported and never scored (A4: the run's log confirms the
    comparisons): every regex of ``expect`` must match some line of it."""

    deliverable: str
    title: str
    expect: tuple[str, ...]


@dataclass(frozen=True)
class Visibility:
    case_ids: str = "visible"  # "hidden": students see each case's verdict, never its id or message

    @property
    def hidden(self) -> bool:
        return self.case_ids == "hidden"


@dataclass(frozen=True)
class LatePolicy:
    """Late penalty on the total: ``ceil((late - grace) / 1 day)`` days at a percentage each, capped.

    The grace period shifts every day boundary, so 24 h 10 min late with 15 min of grace is one day.
    ``deadline`` is None in a rubric shared across offerings; ``grader batch --deadline`` sets it.
    """

    deadline: datetime | None
    penalty_percent_per_day: float
    cap_percent: float
    grace_minutes: float = 0.0


@dataclass(frozen=True)
class CaseWeight:
    match: tuple[str, ...]
    weight: float


@dataclass(frozen=True)
class Component:
    """A share of an item earned by the cases that match ``match``.

    ``share`` 0 makes the component advisory: its cases run and their failures are reported, but
    earn and cost nothing (robustness the handout does not ask for).  ``requires_passing`` names
    another component of the item: a case here then counts as passed only where that component's
    cases with the same parameters passed (see :func:`paired`), so a side property such as "in
    place" pays nothing for a function whose values are wrong.
    """

    name: str
    match: tuple[str, ...]
    share: float
    requires_passing: str | None = None

    @property
    def advisory(self) -> bool:
        return self.share == 0


def case_params(case_id: str) -> str:
    """The parameters of a case id: ``ws4-src2`` for ``test_broadcast_inplace[ws4-src2]``."""
    return case_id.partition("[")[2].removesuffix("]")


def paired(side: str, value: str) -> bool:
    """Whether two case ids stand for the same parameters: equal, or one extends the other by more
    ``-``-separated fields (``ws4-src3`` pairs with ``ws4-src3-float32-4x5``, ``ws4`` with every
    ``ws4-...``)."""
    a, b = case_params(side), case_params(value)
    return a == b or a.startswith(b + "-") or b.startswith(a + "-")


@dataclass(frozen=True)
class Threshold:
    min_fraction: float
    share: float


@dataclass(frozen=True)
class CasesScoring:
    components: tuple[Component, ...]
    mode: str = "proportional"  # | "all_or_nothing" | "thresholds"
    thresholds: tuple[Threshold, ...] = ()
    weights: tuple[CaseWeight, ...] = ()  # the item's own rules first, then the rubric's case_weights
    #: case id -> why it weighs nothing (the pack's ``Case.degenerate``)
    degenerate: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def weight(self, case_id: str) -> float:
        """0 for a degenerate case, whatever the rules say (one rule for every pack); else the first
        matching rule's weight; 1 when none matches."""
        if case_id in self.degenerate:
            return 0.0
        return next((w.weight for w in self.weights if matches(w.match, case_id)), 1.0)


@dataclass(frozen=True)
class Condition:
    """One property of a case's trace.  Exactly one comparison is set."""

    metric: str
    max: float | None = None
    min: float | None = None
    relative_to: str | None = None  # the bound is ``max``/``min`` times this metric of the same trace
    empty: bool | None = None
    contains: str | None = None
    excludes: str | None = None


@dataclass(frozen=True)
class TraceCheck:
    """Conditions on one case's trace, all of which must hold to earn ``points``.

    ``judge: pass`` (the default) also needs the case to pass.  ``judge: record`` judges how the
    method communicated whatever its numbers: the case must only have run to the end (a wrong value
    counts; a crash, hang or forbidden call leaves no record to judge).
    """

    case: str
    points: float
    conditions: tuple[Condition, ...]
    describe: str = ""
    judge: str = "pass"


@dataclass(frozen=True)
class TraceScoring:
    checks: tuple[TraceCheck, ...]


@dataclass(frozen=True)
class DeliverableScoring:
    """Checked automatically for existence and format, then scored by an instructor."""

    deliverable: str


@dataclass(frozen=True)
class WrittenQuestion:
    """One question of the answer form: exact fields, and an explanation a person reads.

    ``fields`` (name -> right value: a number or a list of numbers) share ``points - explain``
    equally and are read from the answer's fenced ``answers`` block, never from prose.  ``explain``
    points are provisional while an explanation is present, until an instructor reviews it.
    """

    id: str  # "Q1": also the heading the answer file uses
    points: float
    fields: tuple[tuple[str, float | tuple[float, ...]], ...]
    explain: float = 0.0


@dataclass(frozen=True)
class WrittenScoring:
    deliverable: str
    questions: tuple[WrittenQuestion, ...]


@dataclass(frozen=True)
class ManualScoring:
    instructions: str = ""
    #: (deliverable, question id): where the answer is written; with no words there the item scores 0
    answer: tuple[str, str] | None = None


Scoring = CasesScoring | TraceScoring | DeliverableScoring | WrittenScoring | ManualScoring


@dataclass(frozen=True)
class Item:
    id: str
    title: str
    points: float
    scoring: Scoring
    functions: tuple[str, ...] = ()  # "file::function" whose policy violations zero the item
    on_violation: str = "zero"  # | "report": findings are listed, the score is left alone
    bonus: bool = False


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    points: float
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Bonus:
    cap: float
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Rubric:
    source: Path
    digest: str  # "sha256:<hex>" of the file's bytes
    assignment: Assignment
    student_files: tuple[str, ...]
    deliverables: dict[str, Deliverable]
    tasks: tuple[Task, ...]
    bonus: Bonus | None
    policy: Policy
    limits: Limits
    visibility: Visibility
    late: LatePolicy | None
    advice: tuple[Advice, ...] = ()
    hand_in: HandIn | None = None
    #: the matrix case ids the rubric was checked against; scoring counts a missing one as not run
    case_ids: tuple[str, ...] = field(default=(), repr=False)
    #: "sha256:<hex>" of what decides the matrix's verdicts and what a grading keeps for rescoring: the
    #: pack, student files, deliverables, limits and policy.  Everything else only scores: a result made
    #: under one rubric can be rescored, without running student code, under any with the same digest.
    matrix_digest: str = ""

    @property
    def max_score(self) -> float:
        return sum(task.points for task in self.tasks)

    @property
    def deliverable_files(self) -> tuple[str, ...]:
        """Every file name a deliverable may have: intake copies these besides the student files."""
        return tuple(name for d in self.deliverables.values() for name in d.any_of)

    def items(self) -> list[Item]:
        bonus = list(self.bonus.items) if self.bonus else []
        return [item for task in self.tasks for item in task.items] + bonus

    def item(self, item_id: str) -> Item:
        for item in self.items():
            if item.id == item_id:
                return item
        raise KeyError(item_id)
