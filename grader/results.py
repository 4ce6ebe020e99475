"""The canonical result model.

Every output the grader writes (``results.json``, Gradescope, GitHub Classroom, ``summary.md``,
the terminal table, HTML reports, the gradebook) is a *renderer* of :class:`GradeResult`; none of
them recomputes a score.  The JSON form is described by ``grader/schemas/results.schema.json``,
whose ``$id`` carries :data:`SCHEMA_VERSION`; bump it on any incompatible change.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "1.4"


class Verdict(str, enum.Enum):
    """What happened to one matrix case.  Decided in ``grader.matrix.verdicts``."""

    PASS = "pass"
    WRONG = "wrong"  # ran to completion, returned the wrong value/shape/dtype
    NOT_PARALLEL = "not_parallel"  # the method skipped the communication the handout requires of it
    NOT_IMPLEMENTED = "not_implemented"  # the stub still raises NotImplementedError
    FORBIDDEN = "forbidden"  # reached a collective the policy forbids
    TAMPERING = "tampering"  # traffic measured on the wire that the ranks' own records cannot explain
    HANG = "hang"  # exceeded the case's time budget; stacks of every rank attached
    NOT_RUN = "not_run"  # skipped: its function already hung at this world size, or the total time ran out
    CRASH = "crash"  # a rank raised, exited or died by a signal
    MEMORY = "memory"  # a rank exceeded its memory limit
    IMPORT_ERROR = "import_error"  # the student's module failed to import (syntax error, ...)
    MISSING = "missing"  # the file the case needs was not submitted
    ERROR = "error"  # the grader itself failed on this case (never the student's fault)


class ItemStatus(str, enum.Enum):
    PASSED = "passed"  # full marks
    PARTIAL = "partial"
    FAILED = "failed"  # zero marks
    PENDING_REVIEW = "pending_review"  # a manual item waiting for an instructor
    AUTO_CHECKED = "auto_checked"  # scored automatically, an instructor may override
    MANUAL = "manual"  # scored by an instructor (merged from a manual-scores file)


class TimeSource(str, enum.Enum):
    """Who says when a submission was handed in, most trusted first (``grader.submission_time``)."""

    FLAG = "flag"  # --submitted-at, given by whoever runs the grader
    ROSTER = "roster"  # the submitted_at column of a batch roster
    PUSH = "push"  # --pushed-at: the time the platform's server recorded the push
    COMMIT = "commit"  # the committer date, which the student sets: only with --trust-commit-time
    UNKNOWN = "unknown"  # none of them


class Lateness(str, enum.Enum):
    """Whether the late policy applied, and how."""

    NO_DEADLINE = "no_deadline"
    ON_TIME = "on_time"
    LATE = "late"  # ``GradeResult.late`` holds the penalty
    UNKNOWN = "unknown"  # a deadline but no trusted submission time: no penalty applied, an instructor decides


@dataclass(frozen=True)
class Finding:
    """One use of a forbidden API (static analysis) or one runtime policy violation."""

    rule: str  # e.g. "forbidden-collective", "dynamic-dist-access"
    message: str
    file: str  # path relative to the submission root, e.g. "src/collectives.py"
    line: int
    col: int = 0
    function: str | None = None  # enclosing (or tainted) student function
    source: str = ""  # the offending line, stripped
    origin: str = "static"  # "static" | "runtime" | "trace"


@dataclass(frozen=True)
class CaseTally:
    passed: int
    total: int


@dataclass(frozen=True)
class CaseOutcome:
    """A matrix case as the student sees it in feedback (inputs elided for hidden cases)."""

    id: str
    verdict: Verdict
    message: str = ""


@dataclass
class ItemResult:
    id: str
    title: str
    score: float
    max_score: float
    status: ItemStatus
    feedback: str = ""
    cases: CaseTally = field(default_factory=lambda: CaseTally(0, 0))
    findings: list[Finding] = field(default_factory=list)
    failures: list[CaseOutcome] = field(default_factory=list)  # capped, most informative first
    bonus: bool = False
    manual: bool = False


@dataclass
class TaskResult:
    id: str
    title: str
    score: float
    max_score: float
    items: list[ItemResult]
    bonus: bool = False


#: Why an instructor should look at where a student file came from (:class:`ChosenFile`): the flags
#: the gradebook carries too.
FILE_IN_SUBFOLDER = "file_in_subfolder"  # graded from a folder below the hand-in's top
FILE_CHOSEN = "file_chosen"  # chosen over other files that hold the handout's names


@dataclass(frozen=True)
class ChosenFile:
    """A student file graded from where an instructor would not look first: from a subfolder, or
    chosen over other candidates (:mod:`grader.candidates`); the note of the same file says why."""

    file: str  # the rubric's name for it: "hw12.ipynb"
    found: str  # where it was in the hand-in: "drafts/Copy of hw12.ipynb"
    over: list[str] = field(default_factory=list)  # the other candidates holding the handout's names, best first
    flags: list[str] = field(default_factory=list)  # FILE_IN_SUBFOLDER, FILE_CHOSEN


@dataclass(frozen=True)
class SubmissionInfo:
    source: str  # what the user passed: a path, archive or git URL
    files: dict[str, str]  # path in submission -> "sha256:<hex>"
    digest: str  # sha256 over the sorted file digests: the submission's identity
    commit: str | None = None
    submitted_at: str | None = None  # ISO 8601, from the source below
    problems: list[str] = field(default_factory=list)  # refused/missing files, in plain words
    submitted_at_source: TimeSource = TimeSource.UNKNOWN
    notes: list[str] = field(default_factory=list)  # how a file was found when not by its name, and why
    chosen: list[ChosenFile] = field(default_factory=list)  # files from a subfolder or chosen over others


@dataclass(frozen=True)
class LatePenalty:
    days_late: int
    percent: float
    points: float


@dataclass
class GradeResult:
    assignment: str
    score: float  # tasks + capped bonus - late penalty, never below 0
    max_score: float  # excludes bonus
    tasks: list[TaskResult]
    submission: SubmissionInfo
    grader_version: str
    rubric_digest: str
    #: the digest of what in the rubric decides the matrix's verdicts (``Rubric.matrix_digest``): a result
    #: may be rescored under any rubric with the same one, without running student code again
    matrix_digest: str = ""
    status: str = "graded"  # "graded" | "error" (the grader itself could not finish)
    error: str | None = None
    bonus_score: float = 0.0
    late: LatePenalty | None = None
    lateness: Lateness = Lateness.NO_DEADLINE
    findings: list[Finding] = field(default_factory=list)  # every static + runtime finding
    cases: list[CaseOutcome] = field(default_factory=list)  # every case's verdict, as the student sees it
    notes: list[str] = field(default_factory=list)  # the rubric's advice: reported, never scored
    trace: dict[str, Any] = field(default_factory=dict)  # trace summaries by case id
    isolation: dict[str, str] = field(default_factory=dict)  # layer -> "on" | "off: <why>"
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    schema_version: str = SCHEMA_VERSION

    def items(self) -> list[ItemResult]:
        return [item for task in self.tasks for item in task.items]

    def item(self, item_id: str) -> ItemResult:
        for item in self.items():
            if item.id == item_id:
                return item
        raise KeyError(item_id)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GradeResult:
        return _from_dict(cls, data)

    @classmethod
    def load(cls, path: Path) -> GradeResult:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _jsonable(value: Any) -> Any:
    """``value`` as JSON's types, in one pass: ``dataclasses.asdict`` then a second walk for the enums
    took four times as long (a grading's trace summaries are thousands of small dicts; issue 23)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    """A dataclass's field types, resolved once: resolving them for every object (the annotations are
    strings) took 44 ms of a 60-case result's 45 ms load, and the service's class page loads 1,000."""
    return typing.get_type_hints(cls)


def _from_dict(cls: Any, data: Any) -> Any:
    """Rebuild nested dataclasses from their ``asdict`` form (the inverse of ``to_dict``)."""
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _coerce(hints[f.name], data[f.name])
    return cls(**kwargs)


def _coerce(tp: Any, value: Any) -> Any:
    import types

    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _coerce(args[0], value)
    if origin is list:
        (arg,) = typing.get_args(tp)
        return [_coerce(arg, v) for v in value]
    if origin is dict:
        return dict(value)
    if dataclasses.is_dataclass(tp):
        return _from_dict(tp, value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    return value


def schema_path() -> Path:
    return Path(__file__).with_name("schemas") / "results.schema.json"
