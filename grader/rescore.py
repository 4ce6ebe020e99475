"""Score a finished grading again, under a changed rubric, without running any student code.

A grading's output directory (``grader grade --out DIR``) holds everything scoring reads: the
matrix's per-case verdicts (``junit.xml``), the submission's identity, policy findings and isolation
report (``results.json``) and the deliverables intake took (``deliverables/``).  Points, weights,
components, trace checks, answer keys, the late policy, a deadline and instructor scores can all
change and be applied here; what decides the verdicts themselves (the pack, student files,
deliverables, limits, policy: ``Rubric.matrix_digest``) cannot, and a rubric that changes it is
refused: that needs a regrade.  ``grader batch`` rescores every student this way on every run, so
a change of the scoring part of the rubric, of the deadline or of the manual scores costs seconds.

Whatever is rescored is first read once, through the no-follow reader, into a private copy that
scoring reads (``grader.seal``): a batch's grading (``students/<name>/graded``) only under a seal that
holds for that student, a ``grader grade --out`` directory as unsealed, which the output says.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader import late, scoring
from grader.errors import UserError, environment_fault
from grader.manual import ManualScores, load_manual
from grader.pipeline import DELIVERABLES
from grader.render.outputs import atomic_write, write_outputs
from grader.results import GradeResult
from grader.rubric import Rubric, load_rubric
from grader.seal import (
    SEAL_FILE,
    Untrusted,
    copy_unsealed,
    in_batch,
    key_path,
    load_key,
    open_sealed,
    seal,
)

READ = ("results.json", "junit.xml", DELIVERABLES)  # what scoring reads of a grading


def rescore(graded: Path, rubric: Rubric, manual: ManualScores | None = None) -> GradeResult:
    """The result of the grading in ``graded`` scored under ``rubric`` (and ``manual`` scores).

    A grading that did not finish (status ``error``) stays what it was; one made under a rubric whose
    matrix part differs is a :class:`UserError`."""
    previous = GradeResult.load(graded / "results.json")
    if previous.status != "graded":
        return previous
    if previous.matrix_digest != rubric.matrix_digest:
        raise UserError(
            f"{graded}: graded under a rubric whose pack, files, limits or policy differ from "
            f"{rubric.source}'s: grade it again instead"
        )
    result = scoring.score(
        rubric,
        graded / "junit.xml",
        previous.submission,
        previous.findings,
        graded / DELIVERABLES,
        manual=manual,
        isolation=previous.isolation,
        timings=previous.timings,
    )
    return result


@dataclass(frozen=True)
class Copy:
    """A grading as read once, through the no-follow reader, into a private directory."""

    graded: Path  # the private copy, which scoring reads
    sealed: bool  # a batch's grading, its seal checked; else a `grader grade --out` directory nobody vouches for
    key: dict[str, Any] | None  # the cache key it was sealed with; None unsealed, or for a grading that did not finish


def copy_grading(graded: Path, seal_key: bytes, into: Path) -> Copy:
    """Copy the grading in ``graded`` into ``into``: a batch's (``grader.seal.in_batch``) checked against
    its seal under ``seal_key`` (:class:`Untrusted` when it does not hold), any other as unsealed."""
    path = Path(os.path.abspath(graded))  # as named: `.` in a student's folder is its graded/, links unresolved
    if in_batch(path):
        key = open_sealed(path.parent, path.name, seal_key, into)
        return Copy(into / path.name, True, key)
    copy_unsealed(path, READ, into / path.name)
    return Copy(into / path.name, False, None)


def main(args: argparse.Namespace) -> int:
    """``grader rescore DIR...``: each DIR a ``grader grade --out`` directory, rewritten in place.

    All or nothing: every DIR is read and scored before any is written, so a damaged one (or a batch's
    ``students/*/graded`` whose seal is missing or fails) leaves the class as it was, never half of
    it under the new rubric; the refusal lists every DIR that could not be read.  A batch's grading is
    sealed again from the private copy that was checked and scored, never from what is in DIR by then."""
    rubric = load_rubric(args.rubric)
    rubric = late.under_deadline_option(rubric, args.deadline)
    manual = load_manual(args.manual) if args.manual else {}
    start = time.monotonic()
    key = load_key(key_path(args.seal_key)) if any(in_batch(d) for d in args.dirs) else b""
    done, failed = [], []
    with tempfile.TemporaryDirectory(prefix="grader-rescore-") as tmp:
        for i, graded in enumerate(args.dirs):
            private = Path(tmp) / str(i)
            try:
                copy = copy_grading(graded, key, private)
                done.append((graded, copy, rescore(copy.graded, rubric, manual.get(graded.name))))
            except Untrusted as exc:
                failed.append(f"{graded}: {exc}: grade it again")
            except UserError as exc:
                where = private / Path(os.path.abspath(graded)).name
                failed.append(str(exc).replace(str(where), str(graded)))  # where it is, not its copy
            except Exception as exc:  # a damaged grading is its own line in the refusal
                if environment_fault(exc):
                    raise
                failed.append(f"{graded}: cannot be read ({type(exc).__name__}: {exc})")
        if failed:
            raise UserError(
                f"rescored none of the {len(args.dirs)} grading(s): {len(failed)} could not be:\n  "
                + "\n  ".join(failed)
            )
        for graded, copy, result in done:
            written = write_outputs(result, copy.graded, None)  # junit.xml stays: it is the matrix run rescored
            if copy.sealed:  # what was checked and scored, sealed again: never what is in DIR by now
                seal(copy.graded.parent, copy.graded.name, key, Path(os.path.abspath(graded)).parent.name)
                written.append(copy.graded / SEAL_FILE)
            for path in written:
                atomic_write(graded / path.name, path.read_bytes())
            unsealed = "" if copy.sealed else " (unsealed: a `grader grade --out` directory, which no seal vouches for)"
            print(f"{graded}: {result.score:g}/{result.max_score:g}{unsealed}")
    print(f"rescored {len(args.dirs)} grading(s) in {time.monotonic() - start:.2f} s", file=sys.stderr)
    return 0
