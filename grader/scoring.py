"""From the matrix's junit.xml, the policy findings and the deliverables to a :class:`GradeResult`.

This is the only place a score is computed; every renderer reads the result.  What it builds on:
the cases as the session recorded them (``grader.junit``), the late policy (``grader.late``) and the
items a person scores (``grader.manual_items``).  Feedback is written
for the student: which cases fail, grouped by what went wrong, with the matrix's one-line diagnosis
of the first of each kind, so the student knows what to fix and not merely that something is off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import grader
from grader.deliverables import check_advice
from grader.junit import Case, read_junit
from grader.late import late_penalty, lateness
from grader.manual import ManualScores
from grader.manual_items import ManualItems, rubric_pack
from grader.results import (
    CaseOutcome,
    CaseTally,
    Finding,
    GradeResult,
    ItemResult,
    ItemStatus,
    SubmissionInfo,
    TaskResult,
    Verdict,
)
from grader.rubric import (
    CasesScoring,
    Component,
    Condition,
    Item,
    Rubric,
    TraceCheck,
    TraceScoring,
    matches,
    paired,
)

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


def _by_reason(cases: list[Case], degenerate: dict[str, str]) -> dict[str, list[Case]]:
    """Unscored cases grouped by why they weigh nothing ("" for a rubric's own weight 0), in order."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(degenerate.get(case.id, ""), []).append(case)
    return groups


def _quote(outcome: CaseOutcome) -> str:
    return f"{outcome.message} ({outcome.id})" if outcome.message else outcome.id


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


def _pack_feedback(rubric: Rubric, submission_root: Path) -> list[str]:
    """The pack's notes on how it read the hand-in (a report's snippets and where they went)."""
    pack = rubric_pack(rubric)
    return [] if pack is None or pack.feedback is None else pack.feedback(submission_root)


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
        self.by_hand = ManualItems(rubric, root, manual)  # checks the manual scores first
        # Every case the rubric was checked against, run or not, then any the catalog did not know.
        self.cases = {cid: junit.get(cid, Case(cid, Verdict.ERROR, ABSENT)) for cid in rubric.case_ids}
        self.cases.update((cid, case) for cid, case in sorted(junit.items()) if cid not in self.cases)
        self.number = {cid: n for n, cid in enumerate(self.cases, start=1)}
        self.done: dict[str, ItemResult] = {}

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
            if item.id in self.by_hand.in_words and evaluation.fraction == 0:
                self.by_hand.read_by_instructor(item, result)
        else:
            result = self.by_hand.item(item, scoring)
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
