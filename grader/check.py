"""``grader check``: the static policy findings of a submission, without running any of it.

The engine's command, not a runtime's.  The student files and the policy come from the rubric, and
the files are taken exactly as ``grader grade`` takes them: :func:`grader.intake.take` into a
temporary sandbox, then the same
``analyze_submission`` call, so the two commands cannot disagree about what a submission holds or
what is wrong with it.  Findings are named by each file's rubric path (intake does not record where
in the submission it found a file).  A lone ``.py`` file, which intake does not take, is judged on
its own.  Findings are a report, not a failure: exit 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader import intake
from grader.errors import UserError
from grader.results import Finding
from grader.runtimes.torchdist.static import analyze_files, analyze_submission
from grader.text import shown

if TYPE_CHECKING:
    from grader.rubric import Rubric


def main(args: argparse.Namespace) -> int:
    """``grader check``: print the static findings.  Findings are a report, not a failure (exit 0)."""
    from grader.rubric import load_rubric

    rubric = load_rubric(args.rubric)
    path = Path(args.submission)
    if path.suffix == ".py" and path.is_file():
        checked, findings = _check_file(path, rubric)
    else:
        checked, findings = _check_submission(args.submission, rubric)
    if args.json:
        payload: dict[str, Any] = {
            "submission": str(args.submission),
            "files": checked,
            "findings": [dataclasses.asdict(f) for f in findings],
        }
        print(json.dumps(payload, indent=2))
        return 0
    for finding in findings:
        print(format_finding(finding))
    count = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}" if findings else "no findings"
    print(f"{count} in {', '.join(checked)}")
    return 0


def _check_submission(source: str, rubric: Rubric) -> tuple[list[str], list[Finding]]:
    """A directory, archive or git repository, taken and analysed as ``grader grade`` does."""
    with tempfile.TemporaryDirectory(prefix="grader-check-") as work:
        taken = intake.take(source, rubric, Path(work) / "sandbox")
        refusals = [problem for problem in taken.problems if not problem.endswith(" is missing")]
        present = list(taken.student_files)
        if not present:
            looked = f"looked for {', '.join(rubric.student_files)}, also by file name alone"
            where = f"here and in a folder up to {intake.SEARCH_DEPTH} levels down"
            raise UserError("; ".join([f"no student files in {shown(str(source))} ({looked}, {where})", *refusals]))
        for problem in refusals:  # why a file the rubric names was not taken (a symlink, too big...)
            print(f"grader: note: {problem}", file=sys.stderr)
        return present, analyze_submission(taken.sandbox, present, rubric.policy)


def _check_file(path: Path, rubric: Rubric) -> tuple[list[str], list[Finding]]:
    """A lone ``.py`` file: judged under the rubric path with its file name (else under its own name),
    and reported under its own name."""
    name = next((f for f in rubric.student_files if Path(f).name == path.name and f.endswith(".py")), path.name)
    findings = analyze_files({name: path}, rubric.policy)
    return [path.name], [dataclasses.replace(f, file=path.name) for f in findings]


def format_finding(finding: Finding) -> str:
    """``file:line:col: rule in function: message`` and the quoted line, as a compiler prints them."""
    where = f" in {finding.function}" if finding.function else ""
    head = f"{finding.file}:{finding.line}:{finding.col + 1}: {finding.rule}{where}: {finding.message}"
    return f"{head}\n    {finding.source}" if finding.source else head
