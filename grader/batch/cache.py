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
import tempfile
from pathlib import Path
from typing import Any

from grader import __version__
from grader.batch.roster import Student
from grader.errors import UserError
from grader.intake import take
from grader.results import TimeSource
from grader.rubric import Rubric
from grader.submission_time import given

KEY_FILE = "cache-key.json"


def submission_key(
    student: Student, rubric: Rubric, scratch: Path, trust_commit_time: bool = False
) -> tuple[dict[str, Any] | None, str]:
    """The cache key of a submission: ``(None, why)`` when there is nothing to grade.

    The digest is ``SubmissionInfo.digest`` itself: intake's ``take`` copies the rubric's files
    into a throw-away sandbox exactly as ``grader grade`` will, so a cached result is valid precisely
    when the files it graded are unchanged.  The submission time and its source are part of the key
    (they decide lateness).
    """
    if not student.source:
        return None, "no submission listed in the roster"
    with tempfile.TemporaryDirectory(prefix=".tmp-key-", dir=scratch) as tmp:
        try:
            when = given(student.submitted_at, TimeSource.ROSTER)
            taken = take(student.source, rubric, Path(tmp) / "sandbox", when, trust_commit_time)
        except UserError as exc:
            return None, str(exc)
    if not taken.present:
        return None, "none of the rubric's files: " + "; ".join(taken.problems)
    key = {
        "submission": taken.info.digest,
        "submitted_at": taken.info.submitted_at,
        "submitted_at_source": taken.info.submitted_at_source.value,
        "matrix": rubric.matrix_digest,
        "grader_version": __version__,
    }
    return key, ""


def is_cached(graded: Path, key: dict[str, Any]) -> bool:
    """Whether ``graded`` holds a finished grading made for ``key``: its result and the matrix run
    (``junit.xml``) every batch scores it from again."""
    return (
        read_json(graded / KEY_FILE) == key and (graded / "results.json").is_file() and (graded / "junit.xml").is_file()
    )


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
