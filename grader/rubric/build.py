"""From schema-valid rubric data to the dataclasses of ``model``, checking on the way every rule a
schema cannot state (point sums, every case pattern matching a matrix case, references between
sections), each error at its YAML position."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from grader.limits import Limits
from grader.rubric.model import (
    Advice,
    Assignment,
    Bonus,
    CasesScoring,
    CaseWeight,
    Component,
    Condition,
    Deliverable,
    DeliverableScoring,
    HandIn,
    Item,
    LatePolicy,
    ManualScoring,
    Rubric,
    Scoring,
    Task,
    Threshold,
    TraceCheck,
    TraceScoring,
    Visibility,
    WrittenQuestion,
    WrittenScoring,
    matches,
    paired,
)
from grader.rubric.source import Error, KeyPath, Positions
from grader.runtimes.torchdist.policy import COLLECTIVES, PROCESS_GROUP_METHODS, FunctionPolicy, Policy

#: The keys of an item that say how it is scored; an item has exactly one of them.
SCORING_KINDS = ("cases", "trace", "deliverable", "written", "manual")
#: Trace metrics compared with ``max``/``min``; the others are lists, checked with empty/contains/excludes.
NUMERIC_METRICS = frozenset({"max_sends_per_rank", "max_bytes_sent_per_rank", "tensor_bytes"})


def _tuple(patterns: str | list[str]) -> tuple[str, ...]:
    return (patterns,) if isinstance(patterns, str) else tuple(patterns)


class Builder:
    """Builds the dataclasses from schema-valid data, collecting every cross-field error on the way."""

    def __init__(self, positions: Positions, case_ids: tuple[str, ...], degenerate: dict[str, str]) -> None:
        self.positions = positions
        self.case_ids = case_ids
        self.degenerate = degenerate
        self.errors: list[Error] = []
        self.student_files: tuple[str, ...] = ()
        self.deliverables: dict[str, Deliverable] = {}
        self.case_weights: tuple[CaseWeight, ...] = ()
        self.item_ids: list[str] = []

    def error(self, path: KeyPath, reason: str, *, key: bool = False) -> None:
        self.errors.append(self.positions.error(path, reason, key=key))

    def rubric(self, data: dict[str, Any], source: Path, digest: str) -> Rubric:
        self.student_files = tuple(data["student_files"])
        self.deliverables = {
            name: Deliverable(name, tuple(d["any_of"])) for name, d in data.get("deliverables", {}).items()
        }
        self.case_weights = self.weights(data.get("case_weights", []), ("case_weights",))
        policy_data = data.get("policy", {})
        on_violation = policy_data.get("on_violation", "zero")
        tasks = tuple(self.task(task, ("tasks", i), on_violation) for i, task in enumerate(data["tasks"]))
        bonus = None
        if "bonus" in data:
            raw_items = data["bonus"]["items"]
            items = tuple(
                self.item(it, ("bonus", "items", i), on_violation, bonus=True) for i, it in enumerate(raw_items)
            )
            bonus = Bonus(cap=data["bonus"]["cap"], items=items)
        late = data.get("late")
        assignment = Assignment(**data["assignment"])
        limits = Limits(**data.get("limits", {}))
        matrix = {
            "pack": assignment.pack,
            "student_files": data["student_files"],
            "deliverables": data.get("deliverables", {}),
            "limits": dataclasses.asdict(limits),
            "policy": policy_data.get("allow", {}),
        }
        if "hand_in" in data:  # what is taken for the hand-in; absent, the digest is what it always was
            matrix["hand_in"] = data["hand_in"]
        matrix_digest = "sha256:" + hashlib.sha256(json.dumps(matrix, sort_keys=True).encode()).hexdigest()
        return Rubric(
            source=source,
            digest=digest,
            assignment=assignment,
            student_files=self.student_files,
            deliverables=self.deliverables,
            tasks=tasks,
            bonus=bonus,
            policy=self.policy(policy_data.get("allow", {})),
            limits=limits,
            visibility=Visibility(**data.get("visibility", {})),
            late=self.late(late) if late is not None else None,
            advice=tuple(self.advice(a, ("advice", i)) for i, a in enumerate(data.get("advice", []))),
            hand_in=self.hand_in(data["hand_in"]) if "hand_in" in data else None,
            case_ids=self.case_ids,
            matrix_digest=matrix_digest,
        )

    # -- sections

    def policy(self, allow: dict[str, list[str]]) -> Policy:
        known = COLLECTIVES | PROCESS_GROUP_METHODS
        for key, names in allow.items():
            path: KeyPath = ("policy", "allow", key)
            if key.split("::")[0] not in self.student_files:
                self.error(path, f"policy.allow: {key!r} is not in student_files", key=True)
            for i, name in enumerate(names):
                if name not in known:
                    self.error((*path, i), f"policy.allow.{key}: {name!r} is not a torch.distributed collective")
        return Policy(functions={key: FunctionPolicy(frozenset(names)) for key, names in allow.items()})

    def hand_in(self, raw: dict[str, Any]) -> HandIn:
        """One hand-in to recognise: its student files must be one file in several formats (the same
        path but for the suffix), or a submission's other files could be taken for the wrong one."""
        stems = {str(Path(name).with_suffix("")) for name in self.student_files}
        if len(stems) > 1:
            self.error(("hand_in",), "hand_in: the student files must be one hand-in (one name in several formats)")
        return HandIn(tuple(raw["holds"]), tuple(raw.get("given", ())))

    def late(self, late: dict[str, Any]) -> LatePolicy:
        deadline = None
        if late["deadline"] is not None:
            try:
                deadline = datetime.fromisoformat(late["deadline"])
            except ValueError:
                self.error(("late", "deadline"), f"late.deadline: {late['deadline']!r} is not an ISO 8601 time")
            else:
                if deadline.tzinfo is None:
                    self.error(("late", "deadline"), "late.deadline: give a time zone, e.g. +00:00")
        return LatePolicy(
            deadline=deadline,
            penalty_percent_per_day=late["penalty_percent_per_day"],
            cap_percent=late["cap_percent"],
            grace_minutes=late.get("grace_minutes", 0.0),
        )

    def task(self, task: dict[str, Any], path: KeyPath, on_violation: str) -> Task:
        items = tuple(
            self.item(it, (*path, "items", i), on_violation, bonus=False) for i, it in enumerate(task["items"])
        )
        total = sum(item.points for item in items)
        if not math.isclose(total, task["points"], abs_tol=1e-9):
            self.error(
                (*path, "points"),
                f"task {task['id']}: its items' points add up to {total:g}, not {task['points']:g}",
            )
        return Task(id=task["id"], title=task["title"], points=task["points"], items=items)

    def item(self, raw: dict[str, Any], path: KeyPath, on_violation: str, *, bonus: bool) -> Item:
        item_id = raw["id"]
        if item_id in self.item_ids:
            self.error((*path, "id"), f"item id {item_id!r} is used twice")
        kinds = [kind for kind in SCORING_KINDS if kind in raw]
        if len(kinds) != 1:
            found = ", ".join(kinds) or "none"
            self.error(path, f"item {item_id}: give exactly one of {', '.join(SCORING_KINDS)} (found: {found})")
        for i, function in enumerate(raw.get("functions", [])):
            if function.split("::")[0] not in self.student_files:
                self.error((*path, "functions", i), f"item {item_id}: {function!r} is not in student_files")
        scoring = self.scoring(kinds[0] if kinds else "manual", raw, path)
        self.item_ids.append(item_id)
        return Item(
            id=item_id,
            title=raw["title"],
            points=raw["points"],
            scoring=scoring,
            functions=tuple(raw.get("functions", [])),
            on_violation=raw.get("on_violation", on_violation),
            bonus=bonus,
        )

    def scoring(self, kind: str, raw: dict[str, Any], path: KeyPath) -> Scoring:
        item_id, points = raw["id"], raw["points"]
        value: Any = raw.get(kind)
        if kind == "cases":
            return self.cases(value, (*path, "cases"), item_id)
        if kind == "trace":
            return self.trace(value, (*path, "trace"), item_id, points)
        if kind == "deliverable":
            self.deliverable_exists(value, (*path, "deliverable"), item_id)
            return DeliverableScoring(value)
        if kind == "written":
            return self.written(value, (*path, "written"), item_id, points)
        manual = dict(value or {})
        answer = manual.pop("answer", None)
        if answer is not None:
            self.deliverable_exists(answer["deliverable"], (*path, "manual", "answer", "deliverable"), item_id)
        return ManualScoring(**manual, answer=(answer["deliverable"], answer["question"]) if answer else None)

    # -- scoring kinds

    def patterns(self, value: str | list[str], path: KeyPath) -> tuple[str, ...]:
        patterns = _tuple(value)
        for i, pattern in enumerate(patterns):
            if not any(matches((pattern,), case) for case in self.case_ids):
                where = path if isinstance(value, str) else (*path, i)
                self.error(where, f"case pattern {pattern!r} matches no matrix case")
        return patterns

    def weights(self, rules: list[dict[str, Any]], path: KeyPath) -> tuple[CaseWeight, ...]:
        return tuple(
            CaseWeight(self.patterns(rule["match"], (*path, i, "match")), rule["weight"])
            for i, rule in enumerate(rules)
        )

    def cases(self, raw: dict[str, Any], path: KeyPath, item_id: str) -> CasesScoring:
        if ("match" in raw) == ("components" in raw):
            self.error(path, f"item {item_id}: cases needs either match or components")
        if "components" in raw:
            components = tuple(
                Component(
                    c["name"],
                    self.patterns(c["match"], (*path, "components", i, "match")),
                    c["share"],
                    c.get("requires_passing"),
                )
                for i, c in enumerate(raw["components"])
            )
        else:
            components = (Component("", self.patterns(raw.get("match", []), (*path, "match")), 1.0),)
        shares = sum(c.share for c in components)
        if not math.isclose(shares, 1.0, abs_tol=1e-9):
            self.error((*path, "components"), f"item {item_id}: component shares add up to {shares:g}, not 1")
        by_name = {c.name: c for c in components}
        for i, component in enumerate(components):
            gate = by_name.get(component.requires_passing or "")
            where = (*path, "components", i, "requires_passing")
            if component.requires_passing is None:
                continue
            if gate is None or gate is component:
                self.error(
                    where,
                    f"item {item_id}: requires_passing {component.requires_passing!r} is not another "
                    "component of this item",
                )
                continue
            gated = [c for c in self.case_ids if matches(component.match, c)]
            gates = [c for c in self.case_ids if matches(gate.match, c)]
            alone = next((c for c in gated if not any(paired(c, g) for g in gates)), None)
            if alone is not None:
                self.error(where, f"item {item_id}: {alone} has no case of {gate.name!r} with the same parameters")
        mode = raw.get("mode", "proportional")
        if (mode == "thresholds") != ("thresholds" in raw):
            self.error(path, f"item {item_id}: thresholds are given exactly when mode is thresholds")
        thresholds = tuple(Threshold(**t) for t in raw.get("thresholds", []))
        scoring = CasesScoring(
            components=components,
            mode=mode,
            thresholds=thresholds,
            weights=self.weights(raw.get("weights", []), (*path, "weights")) + self.case_weights,
            degenerate=self.degenerate,
        )
        for i, component in enumerate(components):
            if component.advisory:
                continue
            if not any(scoring.weight(c) > 0 for c in self.case_ids if matches(component.match, c)):
                where = (*path, "components", i) if "components" in raw else path
                self.error(where, f"item {item_id}: every case it matches has weight 0, so it can never score")
        return scoring

    def trace(self, raw: list[dict[str, Any]], path: KeyPath, item_id: str, points: float) -> TraceScoring:
        checks = []
        for i, check in enumerate(raw):
            where: KeyPath = (*path, i)
            cases = [c for c in self.case_ids if matches((check["case"],), c)]
            if len(cases) != 1:
                self.error((*where, "case"), f"trace check: {check['case']!r} must name exactly one matrix case")
            if ("metric" in check) == ("all_of" in check):
                self.error(where, "trace check: give either metric (one condition) or all_of (a list of them)")
            given = check.get("all_of", [check])
            paths = [(*where, "all_of", j) for j in range(len(given))] if "all_of" in check else [where]
            conditions = tuple(self.condition(c, at) for c, at in zip(given, paths, strict=True) if "metric" in c)
            checks.append(
                TraceCheck(
                    case=check["case"],
                    points=check["points"],
                    conditions=conditions,
                    describe=check.get("describe", ""),
                    judge=check.get("judge", "pass"),
                )
            )
        total = sum(c.points for c in checks)
        if not math.isclose(total, points, abs_tol=1e-9):
            self.error(path, f"item {item_id}: its trace checks' points add up to {total:g}, not {points:g}")
        return TraceScoring(tuple(checks))

    def condition(self, raw: dict[str, Any], where: KeyPath) -> Condition:
        comparisons = ("max", "min", "empty", "contains", "excludes", "relative_to")
        given = [k for k in comparisons[:-1] if k in raw]
        numeric = raw["metric"] in NUMERIC_METRICS
        allowed = ("max", "min") if numeric else ("empty", "contains", "excludes")
        if len(given) != 1 or given[0] not in allowed:
            # Point at the comparison that does not belong, if there is one.
            extra = [k for k in given if k not in allowed] + given[1:]
            self.error(
                (*where, extra[0]) if extra else where,
                f"trace check on {raw['metric']}: give exactly one of {', '.join(allowed)}",
                key=bool(extra),
            )
        if "relative_to" in raw and not numeric:
            self.error((*where, "relative_to"), "trace check: relative_to only applies to max/min")
        return Condition(raw["metric"], **{k: raw[k] for k in comparisons if k in raw})

    def advice(self, raw: dict[str, Any], path: KeyPath) -> Advice:
        if raw["deliverable"] not in self.deliverables:
            self.error((*path, "deliverable"), f"advice: deliverable {raw['deliverable']!r} is not declared")
        for i, regex in enumerate(raw["expect"]):
            try:
                re.compile(regex)
            except re.error as exc:
                self.error((*path, "expect", i), f"bad regex: {exc}")
        return Advice(raw["deliverable"], raw["title"], tuple(raw["expect"]))

    def deliverable_exists(self, name: str, path: KeyPath, item_id: str) -> None:
        if name not in self.deliverables:
            self.error(path, f"item {item_id}: deliverable {name!r} is not declared under deliverables")

    def written(self, raw: dict[str, Any], path: KeyPath, item_id: str, points: float) -> WrittenScoring:
        self.deliverable_exists(raw["deliverable"], (*path, "deliverable"), item_id)
        questions = []
        for i, q in enumerate(raw["questions"]):
            explain = q.get("explain", 0.0)
            if explain >= q["points"]:
                self.error((*path, "questions", i, "explain"), f"{q['id']}: explain must leave points for the fields")
            fields = tuple(
                (name, tuple(value) if isinstance(value, list) else value) for name, value in q["fields"].items()
            )
            questions.append(WrittenQuestion(q["id"], q["points"], fields, explain))
        ids = [q.id for q in questions]
        if len(set(ids)) != len(ids):
            self.error((*path, "questions"), f"item {item_id}: question ids repeat")
        total = sum(q.points for q in questions)
        if not math.isclose(total, points, abs_tol=1e-9):
            self.error(path, f"item {item_id}: its questions' points add up to {total:g}, not {points:g}")
        return WrittenScoring(raw["deliverable"], tuple(questions))
