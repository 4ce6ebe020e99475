"""When a student needs grading again: the cache key, computed without grading.

A grading is cached per student under a key that says what its verdicts are valid for: the
submission's files (intake's digest), its submission time and where that came from, the rubric's
matrix part (``Rubric.matrix_digest``: pack, files, deliverables, limits, policy) and the grader's
version.  Everything else in the rubric, the deadline and the manual scores only score, and
``grader batch`` applies them to every student on every run (``grader.rescore``), without running
any student code again.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from grader import __version__
from grader.batch.roster import Student
from grader.errors import UserError
from grader.gradebook import DAMAGED_ARCHIVE, EMPTY, UNREADABLE_FLAG
from grader.intake import take
from grader.nolinks import Refused, open_nofollow
from grader.results import TimeSource
from grader.rubric import Rubric
from grader.seal import Untrusted, open_sealed
from grader.submission_time import given


def submission_key(
    student: Student, rubric: Rubric, scratch: Path, trust_commit_time: bool = False
) -> tuple[dict[str, Any] | None, str, str]:
    """The cache key of a submission; ``(None, why, flag)`` when there is nothing to grade, ``flag``
    the gradebook's (an empty hand-in is not an unreadable one).

    The digest is ``SubmissionInfo.digest`` itself: intake's ``take`` copies the rubric's files
    into a throw-away sandbox exactly as ``grader grade`` will, so a cached result is valid precisely
    when the files it graded are unchanged.  The submission time and its source are part of the key
    (they decide lateness).
    """
    if not student.source:
        return None, "no submission listed in the roster", EMPTY
    with tempfile.TemporaryDirectory(prefix=".tmp-key-", dir=scratch) as tmp:
        try:
            when = given(student.submitted_at, TimeSource.ROSTER)
            taken = take(student.source, rubric, Path(tmp) / "sandbox", when, trust_commit_time)
        except UserError as exc:
            archive = Path(student.source).is_file()
            return None, str(exc), DAMAGED_ARCHIVE if archive else UNREADABLE_FLAG
        except OSError as exc:  # a folder of the roster this account may not read: the student's row
            if not _in_roster(exc, student):
                raise
            return None, f"cannot read the submission: {exc.strerror}: {exc.filename}", UNREADABLE_FLAG
    if not taken.present:
        problems = "; ".join(taken.problems)
        damaged = Path(student.source).is_file() and any("damaged" in p for p in taken.problems)
        return None, "none of the rubric's files: " + problems, DAMAGED_ARCHIVE if damaged else EMPTY
    key = {
        "submission": taken.info.digest,
        "submitted_at": taken.info.submitted_at,
        "submitted_at_source": taken.info.submitted_at_source.value,
        "matrix": rubric.matrix_digest,
        "grader_version": __version__,
    }
    return key, "", ""


def _in_roster(exc: OSError, student: Student) -> bool:
    """Whether ``exc`` is about the submission's own files (not the batch's scratch space)."""
    return exc.filename is not None and Path(str(exc.filename)).is_relative_to(student.source)


def cached(student_dir: Path, graded: str, key: dict[str, Any], seal_key: bytes) -> tuple[bool, str]:
    """``(True, "")`` when ``student_dir`` holds a finished grading made for ``key`` under a seal that
    holds for this student (``grader.seal``); else ``(False, why it is not trusted)``, ``why`` empty
    when there is simply nothing usable: no grading yet, a failed one (no key recorded), or a stale key
    (the student handed in again, or the rubric's matrix part or the grader changed)."""
    if not os.path.lexists(student_dir / graded):
        return False, ""
    try:
        return open_sealed(student_dir, graded, seal_key) == key, ""
    except Untrusted as exc:
        return False, str(exc)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, read without following a link (``grader.nolinks``); None when there is none."""
    try:
        with os.fdopen(open_nofollow(path.parent, path.name), "rb") as fh:
            return json.loads(fh.read())
    except (Refused, OSError, ValueError):
        return None
