"""From the matrix's junit.xml, the policy findings and the deliverables to a :class:`GradeResult`.

This is the only place a score is computed; every renderer reads the result.  Feedback is written
for the student: which cases fail, grouped by what went wrong, with the matrix's one-line diagnosis
of the first of each kind, so the student knows what to fix and not merely that something is off.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from xml.etree.ElementTree import ParseError

from junitparser import JUnitXml, Properties, TestCase

import grader
from grader.deliverables import answer_sections, check_advice, check_diagram, check_written, find_deliverable
from grader.errors import GraderError, UserError
from grader.manual import ManualScores
from grader.results import (
    CaseOutcome,
    CaseTally,
    Finding,
    GradeResult,
    ItemResult,
    ItemStatus,
    Lateness,
    LatePenalty,
    SubmissionInfo,
    TaskResult,
    Verdict,
)
from grader.rubric import (
    CasesScoring,
    Component,
    Condition,
    DeliverableScoring,
    Item,
    LatePolicy,
    ManualScoring,
    Rubric,
    TraceCheck,
    TraceScoring,
    WrittenScoring,
    matches,
    paired,
)
from grader.submission_time import TIME_FORMS, parse_time

if TYPE_CHECKING:
    from grader.pack import AssignmentPack

MAX_FAILURES = 5  # CaseOutcomes kept per item
EXAMPLES_PER_VERDICT = 2  # distinct messages quoted per kind of failure
ABSENT = "did not run (the grading run was cut short before this case)"

#: How a group of failing cases reads: "3/12 cases <phrase>: <first message>".
_PHRASES = {
    Verdict.WRONG: "give a wrong result",
    Verdict.NOT_PARALLEL: "skip the communication the handout requires",
    Verdict.NOT_IMPLEMENTED: "are not implemented yet",
    Verdict.FORBIDDEN: "reach a forbidden collective",
    Verdict.TAMPERING: "move data the grader's measurement cannot account for",
    Verdict.HANG: "hang",
    Verdict.NOT_RUN: "were not run",
    Verdict.CRASH: "crash",
    Verdict.MEMORY: "exceed the memory limit",
    Verdict.IMPORT_ERROR: "fail to import your code",
    Verdict.MISSING: "cannot run",
    Verdict.ERROR: "could not be run by the grader (not your fault: tell your instructor)",
}


@dataclass(frozen=True)
class Case:
    """One matrix case as the junit file reports it (or as absent from it)."""

    id: str
    verdict: Verdict
    message: str = ""
    trace: dict[str, Any] | None = None


def read_junit(path: Path) -> dict[str, Case]:
    """Cases by id from a pytest junit.xml (xunit1: properties inside each testcase)."""
    try:
        xml = JUnitXml.fromfile(str(path))
    except (OSError, ParseError) as exc:
        raise GraderError(f"cannot read the matrix results {path}: {exc}") from exc
    suites = list(xml) if isinstance(xml, JUnitXml) else [xml]
    return {case.name: _case(case) for suite in suites for case in suite}


def _case(case: TestCase) -> Case:
    props = {p.name: p.value for props in case.iterchildren(Properties) for p in props}
    trace = None
    if props.get("trace"):
        try:
            trace = json.loads(props["trace"])
        except json.JSONDecodeError:
            trace = None  # checks on it then say no trace was recorded
    try:
        verdict = Verdict(props["verdict"])
    except (KeyError, ValueError):
        # No verdict means the matrix itself broke on this case: never the student's fault.
        detail = "; ".join(r.message or type(r).__name__ for r in case.result)
        return Case(case.name, Verdict.ERROR, f"no verdict recorded{': ' + detail if detail else ''}", trace)
    return Case(case.name, verdict, props.get("message") or "", trace)


def _by_reason(cases: list[Case], degenerate: dict[str, str]) -> dict[str, list[Case]]:
    """Unscored cases grouped by why they weigh nothing ("" for a rubric's own weight 0), in order."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(degenerate.get(case.id, ""), []).append(case)
    return groups


def _quote(outcome: CaseOutcome) -> str:
    return f"{outcome.message} ({outcome.id})" if outcome.message else outcome.id


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


def score(
    rubric: Rubric,
    junit_path: Path,
    submission: SubmissionInfo,
    findings: list[Finding],
    submission_root: Path,
    manual: ManualScores | None = None,
    submitted_at: datetime | None = None,
    isolation: dict[str, str] | None = None,
    timings: dict[str, float] | None = None,
) -> GradeResult:
    """Score one submission: the one place a score is computed, for a grading, a rescore and an
    instructor's manual scores alike.  ``manual`` scores deliverable, written and manual items (a
    comment replaces their feedback); ``submitted_at`` defaults to ``submission.submitted_at``;
    ``submission_root`` holds the deliverables."""
    manual = manual or ManualScores()
    scorer = _Scorer(rubric, read_junit(junit_path), submission, findings, submission_root, manual)
    tasks = [scorer.task(task.id, task.title, task.points, task.items) for task in rubric.tasks]
    total = sum(task.score for task in tasks)
    bonus_score = 0.0
    if rubric.bonus:
        bonus = scorer.task("bonus", "Bonus", rubric.bonus.cap, rubric.bonus.items, bonus=True)
        bonus_score = bonus.score
        tasks.append(bonus)
    when = submitted_at or (datetime.fromisoformat(submission.submitted_at) if submission.submitted_at else None)
    late = late_penalty(rubric.late, when, total + bonus_score)
    final = total + bonus_score - (late.points if late else 0.0)
    return GradeResult(
        assignment=rubric.assignment.id,
        score=round(max(0.0, final), 2),
        max_score=rubric.max_score,
        tasks=tasks,
        submission=submission,
        grader_version=grader.__version__,
        rubric_digest=rubric.digest,
        matrix_digest=rubric.matrix_digest,
        bonus_score=bonus_score,
        late=late,
        lateness=lateness(rubric.late, late),
        findings=list(findings),
        cases=[scorer.outcome(c) for c in scorer.cases.values()],
        notes=submission.notes
        + [
            check_advice(submission_root, rubric.deliverables[a.deliverable].any_of, a.title, a.expect)
            for a in rubric.advice
        ]
        + _pack_feedback(rubric, submission_root),
        trace={scorer.display(c.id): c.trace for c in scorer.cases.values() if c.trace is not None},
        isolation=dict(isolation or {}),
        timings=dict(timings or {}),
    )


def _pack(rubric: Rubric) -> AssignmentPack | None:
    from grader.pack import load_pack

    try:
        return load_pack(rubric.assignment.pack)
    except UserError:  # a rubric validated against case ids it was given, with no pack installed
        return None


def _pack_feedback(rubric: Rubric, submission_root: Path) -> list[str]:
    """The pack's notes on how it read the hand-in (a report's snippets and where they went)."""
    pack = _pack(rubric)
    return [] if pack is None or pack.feedback is None else pack.feedback(submission_root)


#: How much of an answer in words an item's feedback quotes for the instructor.
QUOTED_CHARS = 2000


def _in_words(rubric: Rubric, root: Path) -> dict[str, str]:
    """Cases item id -> the student's words, for the items every case of which is of a kind the pack
    found answered in words where code was asked (``AssignmentPack.review``)."""
    pack = _pack(rubric)
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
        kinds = {kind_of.get(cid) for cid in rubric.case_ids if matches(patterns, cid)}
        if len(kinds) == 1 and (kind := kinds.pop()) in words:
            found[item.id] = words[kind or ""]
    return found


def _status(points: float, max_points: float) -> ItemStatus:
    if points >= max_points - 1e-9:
        return ItemStatus.PASSED
    return ItemStatus.FAILED if points <= 0 else ItemStatus.PARTIAL


@dataclass
class _Evaluation:
    """A cases or trace item before policy violations are applied."""

    fraction: float
    lines: list[str]
    tally: CaseTally
    failures: list[CaseOutcome]
    looked_at: list[str] = field(default_factory=list)  # case ids, for the forbidden-verdict rule


class _Scorer:
    def __init__(
        self,
        rubric: Rubric,
        junit: dict[str, Case],
        submission: SubmissionInfo,
        findings: list[Finding],
        root: Path,
        manual: ManualScores,
    ) -> None:
        self.rubric = rubric
        self.submission = submission
        self.findings = findings
        self.root = root
        self.in_words = _in_words(rubric, root)  # item id -> the words an instructor reads instead of code
        self.manual = self._checked_manual(manual)
        # Every case the rubric was checked against, run or not, then any the catalog did not know.
        self.cases = {cid: junit.get(cid, Case(cid, Verdict.ERROR, ABSENT)) for cid in rubric.case_ids}
        self.cases.update((cid, case) for cid, case in sorted(junit.items()) if cid not in self.cases)
        self.number = {cid: n for n, cid in enumerate(self.cases, start=1)}
        self.done: dict[str, ItemResult] = {}

    def _checked_manual(self, manual: ManualScores) -> ManualScores:
        """The manual-score contract: only deliverable, written and manual items, within 0..max.  A
        typo must not silently leave an item at its automatic score."""
        scorable = {
            item.id: item
            for item in self.rubric.items()
            if isinstance(item.scoring, DeliverableScoring | WrittenScoring | ManualScoring) or item.id in self.in_words
        }
        for item_id, points in manual.scores.items():
            if item_id not in scorable:
                raise UserError(
                    f"manual score for {item_id!r}: not a deliverable, written or manual item, "
                    "nor code answered in words"
                )
            if not 0 <= points <= scorable[item_id].points:
                raise UserError(f"manual score for {item_id}: {points:g} is outside 0..{scorable[item_id].points:g}")
        return manual

    def display(self, case_id: str) -> str:
        """The id students see: with hidden case ids, a stable number instead."""
        return f"hidden case {self.number[case_id]}" if self.rubric.visibility.hidden else case_id

    def outcome(self, case: Case) -> CaseOutcome:
        message = "" if self.rubric.visibility.hidden else case.message
        return CaseOutcome(self.display(case.id), case.verdict, message)

    # -- tasks and items

    def task(self, tid: str, title: str, cap: float, items: Iterable[Item], *, bonus: bool = False) -> TaskResult:
        results = [self.item(item) for item in items]
        earned = round(min(cap, sum(r.score for r in results)), 2)
        return TaskResult(tid, title, earned, cap, results, bonus=bonus)

    def item(self, item: Item) -> ItemResult:
        scoring = item.scoring
        if isinstance(scoring, CasesScoring | TraceScoring):
            evaluation = (
                self.evaluate(item, scoring) if isinstance(scoring, CasesScoring) else self.trace(item, scoring)
            )
            result = ItemResult(
                item.id,
                item.title,
                round(item.points * evaluation.fraction, 2),
                item.points,
                _status(evaluation.fraction, 1.0),
                "\n".join(evaluation.lines),
                evaluation.tally,
                failures=evaluation.failures[:MAX_FAILURES],
                bonus=item.bonus,
            )
            self.apply_policy(item, result, evaluation.looked_at)
            if item.id in self.in_words and evaluation.fraction == 0:
                self.read_by_instructor(item, result)
        else:
            result = self.instructor_item(item, scoring)
        self.done[item.id] = result
        return result

    def apply_policy(self, item: Item, result: ItemResult, looked_at: list[str]) -> None:
        """Zero the item (``on_violation: zero``) when one of its functions reaches a forbidden collective,
        or moves data between ranks that its recorded send/recv calls cannot account for (tampering)."""
        result.findings = [f for f in self.findings if f.function and f"{f.file}::{f.function}" in item.functions]
        static = [f for f in result.findings if f.origin == "static"]
        violating = (Verdict.FORBIDDEN, Verdict.TAMPERING)
        forbidden = [self.cases[c] for c in looked_at if self.cases[c].verdict in violating]
        if not static and not forbidden:
            return
        # Static findings quote the student's own line; a forbidden case only has the matrix's message.
        quotes = [f"{f.file}:{f.line}: {f.source}  ({f.message})" for f in static[:MAX_FAILURES]]
        quotes = quotes or [_quote(o) for o in map(self.outcome, forbidden[:EXAMPLES_PER_VERDICT])]
        functions = ", ".join(f.split("::")[-1] for f in item.functions) or "this item's code"
        what = "reaches a collective the rules forbid here"
        if not static and all(c.verdict is Verdict.TAMPERING for c in forbidden):
            what = "moves data between ranks that its send/recv calls do not account for"
        if item.on_violation == "zero":
            result.score, result.status = 0.0, ItemStatus.FAILED
            head = f"0 points: {functions} {what}:"
        else:
            head = f"{functions} {what} (reported, not scored):"
        result.feedback = "\n".join([head, *(f"  {q}" for q in quotes), result.feedback])

    # -- cases

    def evaluate(self, item: Item, scoring: CasesScoring) -> _Evaluation:
        fraction = 0.0
        lines: list[str] = []
        graded = [c for c in scoring.components if not c.advisory]
        for component in graded:
            ids = [c for c in self.cases if matches(component.match, c)]
            weights = [scoring.weight(c) for c in ids]
            gate = next((c for c in scoring.components if c.name == component.requires_passing), None)
            counted = [self.counts(c, gate) for c in ids]
            passed = sum(w for c, w, ok in zip(ids, weights, counted, strict=True) if ok and self.passed(c))
            fraction += component.share * self._mode(scoring, passed / sum(weights) if sum(weights) else 0.0)
            held_back = [
                c for c, w, ok in zip(ids, weights, counted, strict=True) if w > 0 and not ok and self.passed(c)
            ]
            if held_back and gate is not None:
                lines.append(
                    f"{component.name}: {len(held_back)} passing case(s) not counted, since {gate.name} fails "
                    f"for the same parameters, e.g. {self.display(held_back[0])}"
                )
        ids = [c for c in self.cases if matches(tuple(p for c in graded for p in c.match), c)]
        scored = [self.cases[c] for c in ids if scoring.weight(c) > 0]
        unscored = [self.cases[c] for c in ids if scoring.weight(c) == 0]
        lines[:0] = self.summary(item, scored)
        unscored_failing = [c for c in unscored if c.verdict is not Verdict.PASS]
        for reason, group in _by_reason(unscored_failing, scoring.degenerate).items():
            why = f" ({reason}, so they weigh nothing)" if reason else ""
            lines.append(f"{len(group)} unscored case(s) fail too{why}, e.g. " + _quote(self.outcome(group[0])))
        advisory_failing: list[Case] = []
        for component in (c for c in scoring.components if c.advisory):
            cases = [self.cases[c] for c in self.cases if matches(component.match, c)]
            failing = [c for c in cases if c.verdict is not Verdict.PASS]
            advisory_failing += failing
            if failing:
                lines.append(
                    f"{component.name} (advisory, no points): {len(failing)}/{len(cases)} cases fail, e.g. "
                    + _quote(self.outcome(failing[0]))
                )
            ids += [c.id for c in cases]
        failures = self.most_informative(
            [c for c in scored if c.verdict is not Verdict.PASS] + unscored_failing + advisory_failing
        )
        passed_count = sum(c.verdict is Verdict.PASS for c in scored)
        return _Evaluation(fraction, lines, CaseTally(passed_count, len(scored)), failures, ids)

    def passed(self, case_id: str) -> bool:
        return self.cases[case_id].verdict is Verdict.PASS

    def counts(self, case_id: str, gate: Component | None) -> bool:
        """Whether a case may count: always, or (gated) where every case of ``gate`` with the same
        parameters passed, and there is one."""
        if gate is None:
            return True
        same = [c for c in self.cases if matches(gate.match, c) and paired(case_id, c)]
        return bool(same) and all(self.passed(c) for c in same)

    @staticmethod
    def _mode(scoring: CasesScoring, fraction: float) -> float:
        if scoring.mode == "all_or_nothing":
            return float(fraction >= 1.0)
        if scoring.mode == "thresholds":
            return max((t.share for t in scoring.thresholds if fraction >= t.min_fraction), default=0.0)
        return fraction

    def summary(self, item: Item, cases: list[Case]) -> list[str]:
        """One line per kind of failure: "12/40 cases hang: rank 1 waits in recv(src=0) ... (case id)"."""
        n = len(cases)
        failing = [c for c in cases if c.verdict is not Verdict.PASS]
        if not failing:
            return [f"all {n} cases pass"]
        lines = [f"{n - len(failing)}/{n} cases pass"] if len(failing) < n else []
        by_verdict: dict[Verdict, list[Case]] = {}
        for case in failing:
            by_verdict.setdefault(case.verdict, []).append(case)
        for verdict, group in sorted(by_verdict.items(), key=lambda kv: -len(kv[1])):
            head = f"{len(group)}/{n} cases {_PHRASES[verdict]}"
            if verdict is Verdict.MISSING:  # the matrix's message would only repeat it per case
                lines.append(f"{head}: {self.missing_files(item)}")
                continue
            examples: dict[str, CaseOutcome] = {}  # the first case of each distinct message
            for outcome in map(self.outcome, group):
                examples.setdefault(outcome.message, outcome)
            quoted = [_quote(o) for o in list(examples.values())[:EXAMPLES_PER_VERDICT]]
            lines.append(f"{head}: " + "; ".join(quoted))
        return lines

    def missing_files(self, item: Item) -> str:
        """Which of the item's files (any student file, if it names none) were not submitted."""
        files = {f.split("::")[0] for f in item.functions} or set(self.rubric.student_files)
        missing = sorted(f for f in files if f not in self.submission.files)
        return ", ".join(PurePosixPath(f).name for f in missing) + " missing" if missing else "a file is missing"

    def most_informative(self, failing: list[Case]) -> list[CaseOutcome]:
        """One case of each kind of failure first, then the rest in matrix order."""
        firsts: dict[Verdict, Case] = {}
        for case in failing:
            firsts.setdefault(case.verdict, case)
        first_ids = {case.id for case in firsts.values()}
        ordered = [*firsts.values(), *(c for c in failing if c.id not in first_ids)]
        return [self.outcome(c) for c in ordered[:MAX_FAILURES]]

    # -- trace

    def trace(self, item: Item, scoring: TraceScoring) -> _Evaluation:
        earned, lines = 0.0, []
        probes: dict[str, Case] = {}
        for check in scoring.checks:
            # The loader made sure the pattern names exactly one case.
            case = next(c for cid, c in self.cases.items() if matches((check.case,), cid))
            probes[case.id] = case
            ok, detail = self.trace_check(item, check, case)
            earned += check.points if ok else 0.0
            what = check.describe or ", ".join(c.metric for c in check.conditions)
            lines.append(f"{'ok' if ok else 'not met'}: {what}: {detail}")
        failing = [c for c in probes.values() if c.verdict is not Verdict.PASS]
        tally = CaseTally(len(probes) - len(failing), len(probes))
        fraction = earned / sum(c.points for c in scoring.checks)
        return _Evaluation(fraction, lines, tally, [self.outcome(c) for c in failing], list(probes))

    #: verdicts of a case that ran to the end: its communication record can be judged (``judge: record``)
    RAN_TO_THE_END = frozenset({Verdict.PASS, Verdict.WRONG, Verdict.NOT_PARALLEL})

    def trace_check(self, item: Item, check: TraceCheck, case: Case) -> tuple[bool, str]:
        """Whether the probe counts (passed, or ran to the end under ``judge: record``) and its trace
        meets every condition, and what was seen."""
        outcome = self.outcome(case)
        if case.verdict is Verdict.MISSING:
            return False, f"{outcome.id} cannot run: {self.missing_files(item)}"
        accepted = self.RAN_TO_THE_END if check.judge == "record" else {Verdict.PASS}
        if case.verdict not in accepted:
            return False, f"{outcome.id} did not {'run to the end' if check.judge == 'record' else 'pass'} " + (
                f"({case.verdict.value})" + (f": {outcome.message}" if outcome.message else "")
            )
        seen = []
        for condition in check.conditions:
            ok, detail = _condition(case.trace or {}, condition)
            if ok is None:
                return False, f"{outcome.id} recorded no {condition.metric} (not your fault: tell your instructor)"
            seen.append(detail)
            if not ok:
                return False, "; ".join(seen)
        return True, "; ".join(seen)

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
        return bool(answer_sections(path.read_text(encoding="utf-8", errors="replace")).get(question, "").split())

    def instructors_score(self, item: Item, result: ItemResult, lines: list[str]) -> None:
        """An instructor's score for the item, when the manual scores hold one, said first."""
        if item.id in self.manual.scores:
            result.score, result.status, result.manual = self.manual.scores[item.id], ItemStatus.MANUAL, True
            lines.insert(0, f"scored by an instructor: {result.score:g}/{item.points:g}")
            if self.manual.comments.get(item.id):
                lines.insert(1, f"instructor's comment: {self.manual.comments[item.id]}")

    # -- deliverables, written answers and instructor items

    def instructor_item(self, item: Item, scoring: DeliverableScoring | WrittenScoring | ManualScoring) -> ItemResult:
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


def _condition(trace: dict[str, Any], condition: Condition) -> tuple[bool | None, str]:
    """Whether a trace meets one condition (None: the metric was not recorded), and what was seen."""
    value = trace.get(condition.metric)
    base = trace.get(condition.relative_to) if condition.relative_to else 1
    if value is None or base is None:
        return None, ""
    if isinstance(value, list):
        seen = f"{condition.metric}: {', '.join(map(str, value)) or 'none'}"
        if condition.empty is not None:
            return (not value) == condition.empty, seen
        if condition.contains is not None:
            return condition.contains in value, seen
        return condition.excludes not in value, seen
    limit = condition.max if condition.max is not None else condition.min
    assert limit is not None  # the loader requires exactly one comparison
    bound = limit * base
    ok, sign = (value <= bound, "<=") if condition.max is not None else (value >= bound, ">=")
    relative = f" = {limit:g} x {condition.relative_to}" if condition.relative_to else ""
    return ok, f"{condition.metric} = {value:g} (needs {sign} {bound:g}{relative})"
