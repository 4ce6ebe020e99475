"""The gradebook: one row per roster entry, computed from the students' results alone (and the batch's
status for each: graded, no submission, unreadable, refused, timeout, grader error)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from grader.render.html_kit import fmt_points
from grader.results import GradeResult, ItemStatus, Lateness, Verdict
from grader.text import csv_rows

GRADED, TIMEOUT, GRADER_ERROR, NO_SUBMISSION = "graded", "timeout", "grader_error", "no_submission"
#: A submission the batch could not read (no grade to record: not a 0), and a roster entry it refused.
UNREADABLE, REFUSED = "unreadable", "refused"

#: Flags of the batch itself: why a student has nothing graded, or why a row needs a look.
EMPTY = "empty"  # handed in nothing the rubric names (status no_submission, total 0)
UNREADABLE_FLAG = "unreadable"  # a submission that could not be read (permissions, a failed clone)
DAMAGED_ARCHIVE = "damaged_archive"  # a .zip or .tar.gz that is not one
CACHE_UNTRUSTED = "cache_untrusted"  # the cached grading failed its seal: graded again (grader.seal)
REPORT_FAILED = "report_failed"  # the student's cached grading could not be scored or reported
DUPLICATE = "duplicate"  # the same files as another student's submission (a copy, or a symlink to it)
NOT_A_SUBMISSION = "not_a_submission"  # a plain file among the submission folders
HIDDEN = "hidden"  # an entry whose name starts with . or _
BAD_NAME = "bad_name"  # a name that cannot be a directory name: refused alone
AMBIGUOUS = "ambiguous"  # two entries for one student (alice and alice.zip, a name twice): both refused
#: The flags the batch's summary lists, one line per student.
BATCH_FLAGS = frozenset(
    {EMPTY, UNREADABLE_FLAG, DAMAGED_ARCHIVE, CACHE_UNTRUSTED, REPORT_FAILED, DUPLICATE, NOT_A_SUBMISSION, HIDDEN}
    | {BAD_NAME, AMBIGUOUS}
)
GRADEBOOK_FIXED = ("bonus", "late_penalty", "total", "status", "flags")

#: Case verdicts that become a gradebook flag.
VERDICT_FLAGS = {
    Verdict.FORBIDDEN.value: "forbidden",
    Verdict.TAMPERING.value: "tampering",
    Verdict.NOT_PARALLEL.value: "not_parallel",
    Verdict.HANG.value: "hang",
    Verdict.CRASH.value: "crash",
    Verdict.MEMORY.value: "memory",
    Verdict.IMPORT_ERROR.value: "import_error",
}


@dataclass
class GradebookRow:
    """One gradebook line.  Numbers are rendered from the student's ``GradeResult``."""

    student: str
    status: str
    tasks: dict[str, float] = field(default_factory=dict)  # non-bonus task id -> score
    bonus: float | None = None
    late_penalty: float | None = None
    total: float | None = None  # None when there is no grade to record (timeout, grader error)
    flags: list[str] = field(default_factory=list)
    message: str = ""


def flags_for(status: str, result: GradeResult | None) -> list[str]:
    """Problems an instructor should look at, from the batch status, case verdicts and findings."""
    flags = set()
    if status == TIMEOUT:
        flags.add("timeout")
    if result is not None:
        # every case's verdict (an item's failures are some of them) and every finding (an item's
        # findings are some of them)
        flags |= {VERDICT_FLAGS[c.verdict.value] for c in result.cases if c.verdict.value in VERDICT_FLAGS}
        if result.findings:
            flags.add("forbidden")
        if result.late is not None and result.late.points > 0:
            flags.add("late")
        if result.lateness is Lateness.UNKNOWN:  # no trusted submission time: the instructor decides
            flags.add("late_unknown")
        if any(item.status == ItemStatus.PENDING_REVIEW for item in result.items()):
            flags.add("review")
        if any(item.status == ItemStatus.MANUAL for item in result.items()):
            flags.add("manual")
        # a student file graded from a subfolder, or chosen over other files (results.FILE_IN_SUBFOLDER, FILE_CHOSEN)
        flags |= {flag for chosen in result.submission.chosen for flag in chosen.flags}
    return sorted(flags)


def gradebook_row(
    student: str, status: str, result: GradeResult | None, message: str = "", flags: Iterable[str] = ()
) -> GradebookRow:
    """``flags``: the batch's own (a roster or cache problem), added to those of the result."""
    row = GradebookRow(student, status, flags=sorted({*flags_for(status, result), *flags} - {""}), message=message)
    if status == NO_SUBMISSION:
        row.total = 0.0
    if result is not None and status == GRADED:
        row.tasks = {t.id: t.score for t in result.tasks if not t.bonus}
        row.bonus = result.bonus_score
        row.late_penalty = result.late.points if result.late else 0.0
        row.total = result.score
    return row


def task_columns(results: Iterable[GradeResult | None]) -> list[str]:
    """Non-bonus task ids in rubric order (the union, should rubrics differ between students)."""
    columns: list[str] = []
    for result in results:
        for task in result.tasks if result else []:
            if not task.bonus and task.id not in columns:
                columns.append(task.id)
    return columns


def render_gradebook(rows: list[GradebookRow], tasks: list[str]) -> str:
    """The CSV of ``rows``; a student's name is written as given, only a formula-leading cell is
    neutralised (``grader.text.csv_cell``)."""
    header = ["student", *tasks, *GRADEBOOK_FIXED]
    lines = [
        [
            row.student,
            *(fmt_points(row.tasks.get(t)) for t in tasks),
            fmt_points(row.bonus),
            fmt_points(row.late_penalty),
            fmt_points(row.total),
            row.status,
            " ".join(row.flags),
        ]
        for row in rows
    ]
    return csv_rows([header, *lines])
