"""Score a finished grading again, under a changed rubric, without running any student code.

A grading's output directory (``grader grade --out DIR``) holds everything scoring reads: the
matrix's per-case verdicts (``junit.xml``), the submission's identity, policy findings and isolation
report (``results.json``) and the deliverables intake took (``deliverables/``).  Points, weights,
components, trace checks, answer keys, the late policy, a deadline and instructor scores can all
change and be applied here; what decides the verdicts themselves (the pack, student files,
deliverables, limits, policy: ``Rubric.matrix_digest``) cannot, and a rubric that changes it is
refused: that needs a regrade.  ``grader batch`` rescores every student this way on every run, so
a change of the scoring part of the rubric, of the deadline or of the manual scores costs seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grader import late, scoring
from grader.errors import UserError, environment_fault
from grader.manual import ManualScores, load_manual
from grader.pipeline import DELIVERABLES
from grader.render.outputs import write_outputs
from grader.results import GradeResult
from grader.rubric import Rubric, load_rubric
from grader.seal import SEAL_FILE, broken, key_path, load_key, seal


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


def main(args: argparse.Namespace) -> int:
    """``grader rescore DIR...``: each DIR a ``grader grade --out`` directory, rewritten in place.

    All or nothing: every DIR is read and scored before any is written, so a damaged one (or one
    whose seal fails, for a batch's ``students/*/graded``) leaves the class as it was, never half of
    it under the new rubric; the refusal lists every DIR that could not be read."""
    rubric = load_rubric(args.rubric)
    rubric = late.under_deadline_option(rubric, args.deadline)
    manual = load_manual(args.manual) if args.manual else {}
    start = time.monotonic()
    key = load_key(key_path(args.seal_key)) if any((d / SEAL_FILE).exists() for d in args.dirs) else b""
    done, failed = [], []
    for graded in args.dirs:
        sealed = (graded / SEAL_FILE).exists()
        try:
            why = broken(graded.parent, graded.name, key) if sealed else ""
            if why:
                failed.append(f"{graded}: {why}: grade it again")
                continue
            done.append((graded, rescore(graded, rubric, manual.get(graded.name)), sealed))
        except UserError as exc:
            failed.append(str(exc))
        except Exception as exc:  # a damaged grading is its own line in the refusal
            if environment_fault(exc):
                raise
            failed.append(f"{graded}: cannot be read ({type(exc).__name__}: {exc})")
    if failed:
        raise UserError(
            f"rescored none of the {len(args.dirs)} grading(s): {len(failed)} could not be:\n  " + "\n  ".join(failed)
        )
    for graded, result, sealed in done:
        write_outputs(result, graded, None)  # junit.xml stays: it is the matrix run rescored
        if sealed:  # checked above, so resealing what was rewritten vouches for nothing new
            seal(graded.parent, graded.name, key)
        print(f"{graded}: {result.score:g}/{result.max_score:g}")
    print(f"rescored {len(args.dirs)} grading(s) in {time.monotonic() - start:.2f} s", file=sys.stderr)
    return 0
