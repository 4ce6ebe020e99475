"""Rubrics: what is graded and how, loaded from YAML and checked before any submission is graded.

A rubric is checked twice: its shape against ``schemas/rubric.schema.json``, then the rules a schema
cannot state (point sums, every case pattern matching a matrix case, references between sections).
Both report ``FILE:LINE:COL: reason`` at the YAML node at fault, so whoever edits a rubric is told
where the problem is, not just what it is.

Case patterns are globs over JUnit testcase names in which only ``*`` (any run of characters) and
``?`` (one character) are special.  ``fnmatch`` would read ``[ws4-...]`` as a character class, and
every matrix id contains brackets, so here brackets are literal: ``test_broadcast[*`` means "every
``test_broadcast`` case" and does not match ``test_broadcast_inplace[ws4-src1]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

from grader.errors import UserError
from grader.limits import Limits
from grader.runtimes.torchdist.policy import COLLECTIVES, PROCESS_GROUP_METHODS, FunctionPolicy, Policy

#: The keys of an item that say how it is scored; an item has exactly one of them.
SCORING_KINDS = ("cases", "trace", "deliverable", "written", "manual")
#: Values in a rubric document, counted along every path an alias gives them.
MAX_NODES = 100_000
#: Trace metrics compared with ``max``/``min``; the others are lists, checked with empty/contains/excludes.
NUMERIC_METRICS = frozenset({"max_sends_per_rank", "max_bytes_sent_per_rank", "tensor_bytes"})


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
    #: case id -> why it exercises nothing its family grades (the pack's ``Case.degenerate``)
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


# --------------------------------------------------------------------------- loading


def default_rubric_path() -> Path:
    """The default pack's rubric (``grader.pack``): what ``grader grade`` uses when given none."""
    from grader.pack import load_pack

    return load_pack(None).rubric


def load_rubric(
    path: Path | None = None, case_ids: Sequence[str] | None = None, degenerate: dict[str, str] | None = None
) -> Rubric:
    """Load and validate a rubric; ``UserError`` lists every problem as ``FILE:LINE:COL: reason``.

    ``case_ids`` are the matrix cases patterns must match, and ``degenerate`` those of them that weigh
    nothing (id -> why); by default both are the rubric's pack's (``AssignmentPack.degenerate``).
    """
    path = Path(path) if path is not None else default_rubric_path()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read rubric: {exc.strerror}") from exc
    try:
        if case_ids is None and degenerate is None:
            return _load_as_packed(path, raw)
        return _load(path, raw, case_ids, degenerate)
    except RecursionError:  # PyYAML and the schema validator walk nested collections recursively
        raise UserError(f"{path}: nested too deeply to be a rubric") from None


@functools.lru_cache(maxsize=8)
def _load_as_packed(path: Path, raw: bytes) -> Rubric:
    """A rubric checked against its own pack is parsed and checked once per process for the same
    bytes, however many stages ask (``cli.resolve_rubric``, then the command); a Rubric is frozen."""
    return _load(path, raw, None, None)


def _load(path: Path, raw: bytes, case_ids: Sequence[str] | None, degenerate: dict[str, str] | None) -> Rubric:
    data, positions = _parse(path, raw.decode("utf-8", errors="replace"))
    errors = _schema_errors(data, positions)
    if errors:
        raise UserError(_report(errors))
    if case_ids is None:
        ids, degenerate = _pack_cases(data["assignment"], positions)
    else:
        ids, degenerate = tuple(case_ids), degenerate or {}
    builder = _Builder(positions, ids, degenerate)
    rubric = builder.rubric(data, path, "sha256:" + hashlib.sha256(raw).hexdigest())
    if builder.errors:
        raise UserError(_report(builder.errors))
    return rubric


def _pack_cases(assignment: dict[str, Any], positions: _Positions) -> tuple[tuple[str, ...], dict[str, str]]:
    """The case ids of the rubric's pack and its degenerate ones (id -> why); a pack that cannot be
    loaded is an error at its line."""
    from grader.pack import load_pack

    ref = assignment.get("pack", assignment["id"])
    try:
        pack = load_pack(ref)
        return tuple(pack.case_ids()), pack.degenerate()
    except UserError as exc:
        key = "pack" if "pack" in assignment else "id"
        raise UserError(positions.error(("assignment", key), f"assignment.{key}: {exc}")[1]) from None


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


# --------------------------------------------------------------------------- YAML with positions

_KeyPath = tuple[str | int, ...]
_Error = tuple[tuple[int, int], str]  # ((line, col), "FILE:LINE:COL: reason")


class _Loader(yaml.SafeLoader):
    """A safe loader that keeps timestamps as strings: the schema expects ISO strings for deadlines."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _Positions:
    """Where each value (and each mapping key) of the document starts, by its path."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self.values: dict[_KeyPath, yaml.Mark] = {}
        self.keys: dict[_KeyPath, yaml.Mark] = {}
        self.duplicates: list[_KeyPath] = []

    def record(self, top: yaml.Node, path: _KeyPath) -> None:
        """Walk the document; YAML aliases repeat a node under every path that names it, so the walk
        is bounded (:data:`MAX_NODES`) rather than left to grow with each alias of an alias."""
        pending = [(top, path)]
        while pending:
            node, path = pending.pop()
            self.values[path] = node.start_mark
            if len(self.values) > MAX_NODES:
                raise UserError(f"{self.file}: over {MAX_NODES} values (aliases included): too large to be a rubric")
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    key_path = (*path, str(key_node.value))
                    if key_path in self.keys:
                        self.duplicates.append(key_path)
                    self.keys[key_path] = key_node.start_mark
                    pending.append((value_node, key_path))
            elif isinstance(node, yaml.SequenceNode):
                pending.extend((child, (*path, index)) for index, child in enumerate(node.value))

    def error(self, path: _KeyPath, reason: str, *, key: bool = False) -> _Error:
        """An error at the key (``key=True``) or value at ``path``, else at its nearest ancestor."""
        mark = self.keys.get(path) if key else None
        prefix = path
        while mark is None:
            mark = self.values.get(prefix)
            prefix = prefix[:-1]
        return (mark.line, mark.column), f"{self.file}:{mark.line + 1}:{mark.column + 1}: {reason}"


def _parse(path: Path, text: str) -> tuple[Any, _Positions]:
    try:
        loader = _Loader(text)  # its reader refuses characters YAML does not allow, right away
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: invalid YAML: {exc}") from exc
    try:
        node = loader.get_single_node()
        if node is None:
            raise UserError(f"{path}:1:1: the rubric is empty")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserError(f"{where}: invalid YAML: {exc.problem or exc.context}") from exc
    finally:
        loader.dispose()
    positions = _Positions(path)
    positions.record(node, ())
    return data, positions


def _report(errors: list[_Error]) -> str:
    return "\n".join(text for _, text in sorted(errors))


def _dotted(path: _KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)  # a key may be null
    return out or "rubric"


@functools.lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    schema = json.loads((Path(__file__).with_name("schemas") / "rubric.schema.json").read_text())
    return Draft202012Validator(schema)


def _schema_errors(data: Any, positions: _Positions) -> list[_Error]:
    errors = [positions.error(p, f"duplicate key {p[-1]!r}", key=True) for p in positions.duplicates]
    for err in _validator().iter_errors(data):
        path: _KeyPath = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = err.schema.get("properties", {})
            for key in (k for k in err.instance if k not in known):
                expected = ", ".join(known)
                reason = f"{_dotted((*path, key))}: unknown key {key!r} (expected one of: {expected})"
                errors.append(positions.error((*path, str(key)), reason, key=True))
        elif err.validator == "anyOf":  # its own message names no fix: the schema's description does
            expected = err.schema.get("description", "one of the forms the schema describes")
            errors.append(positions.error(path, f"{_dotted(path)}: expected {expected}"))
        else:
            errors.append(positions.error(path, f"{_dotted(path)}: {err.message}"))
    return errors


# --------------------------------------------------------------------------- cross-field rules


def _tuple(patterns: str | list[str]) -> tuple[str, ...]:
    return (patterns,) if isinstance(patterns, str) else tuple(patterns)


class _Builder:
    """Builds the dataclasses from schema-valid data, collecting every cross-field error on the way."""

    def __init__(self, positions: _Positions, case_ids: tuple[str, ...], degenerate: dict[str, str]) -> None:
        self.positions = positions
        self.case_ids = case_ids
        self.degenerate = degenerate
        self.errors: list[_Error] = []
        self.student_files: tuple[str, ...] = ()
        self.deliverables: dict[str, Deliverable] = {}
        self.case_weights: tuple[CaseWeight, ...] = ()
        self.item_ids: list[str] = []

    def error(self, path: _KeyPath, reason: str, *, key: bool = False) -> None:
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
            case_ids=self.case_ids,
            matrix_digest=matrix_digest,
        )

    # -- sections

    def policy(self, allow: dict[str, list[str]]) -> Policy:
        known = COLLECTIVES | PROCESS_GROUP_METHODS
        for key, names in allow.items():
            path: _KeyPath = ("policy", "allow", key)
            if key.split("::")[0] not in self.student_files:
                self.error(path, f"policy.allow: {key!r} is not in student_files", key=True)
            for i, name in enumerate(names):
                if name not in known:
                    self.error((*path, i), f"policy.allow.{key}: {name!r} is not a torch.distributed collective")
        return Policy(functions={key: FunctionPolicy(frozenset(names)) for key, names in allow.items()})

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

    def task(self, task: dict[str, Any], path: _KeyPath, on_violation: str) -> Task:
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

    def item(self, raw: dict[str, Any], path: _KeyPath, on_violation: str, *, bonus: bool) -> Item:
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

    def scoring(self, kind: str, raw: dict[str, Any], path: _KeyPath) -> Scoring:
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
        return ManualScoring(**(value or {}))

    # -- scoring kinds

    def patterns(self, value: str | list[str], path: _KeyPath) -> tuple[str, ...]:
        patterns = _tuple(value)
        for i, pattern in enumerate(patterns):
            if not any(matches((pattern,), case) for case in self.case_ids):
                where = path if isinstance(value, str) else (*path, i)
                self.error(where, f"case pattern {pattern!r} matches no matrix case")
        return patterns

    def weights(self, rules: list[dict[str, Any]], path: _KeyPath) -> tuple[CaseWeight, ...]:
        return tuple(
            CaseWeight(self.patterns(rule["match"], (*path, i, "match")), rule["weight"])
            for i, rule in enumerate(rules)
        )

    def cases(self, raw: dict[str, Any], path: _KeyPath, item_id: str) -> CasesScoring:
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

    def trace(self, raw: list[dict[str, Any]], path: _KeyPath, item_id: str, points: float) -> TraceScoring:
        checks = []
        for i, check in enumerate(raw):
            where: _KeyPath = (*path, i)
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

    def condition(self, raw: dict[str, Any], where: _KeyPath) -> Condition:
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

    def advice(self, raw: dict[str, Any], path: _KeyPath) -> Advice:
        if raw["deliverable"] not in self.deliverables:
            self.error((*path, "deliverable"), f"advice: deliverable {raw['deliverable']!r} is not declared")
        for i, regex in enumerate(raw["expect"]):
            try:
                re.compile(regex)
            except re.error as exc:
                self.error((*path, "expect", i), f"bad regex: {exc}")
        return Advice(raw["deliverable"], raw["title"], tuple(raw["expect"]))

    def deliverable_exists(self, name: str, path: _KeyPath, item_id: str) -> None:
        if name not in self.deliverables:
            self.error(path, f"item {item_id}: deliverable {name!r} is not declared under deliverables")

    def written(self, raw: dict[str, Any], path: _KeyPath, item_id: str, points: float) -> WrittenScoring:
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
