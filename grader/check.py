"""``grader check``: the static policy findings of a submission, without running any of it.

The engine's command, not a runtime's: it takes the student files and the policy from the rubric
and prints what :func:`grader.runtimes.torchdist.static.analyze_files` finds, one finding per line
as a compiler prints them (or as JSON).  Findings are a report, not a failure: exit 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grader.errors import UserError
from grader.policy import Policy
from grader.results import Finding
from grader.runtimes.torchdist.static import analyze_files


def find_student_files(root: Path, wanted: Iterable[str]) -> dict[str, Path]:
    """Map each wanted path (``src/collectives.py``) to the file holding it: in place, or flat."""
    found = {}
    for rel_path in wanted:
        for candidate in (root / rel_path, root / Path(rel_path).name):
            if candidate.is_file():
                found[rel_path] = candidate
                break
    return found


def _settings(rubric_path: Path | None) -> tuple[Policy, tuple[str, ...]]:
    """The rubric's policy and the Python files among its student files (the default rubric when None)."""
    from grader.rubric import load_rubric

    rubric = load_rubric(rubric_path)
    return rubric.policy, tuple(str(f) for f in rubric.student_files if str(f).endswith(".py"))


def format_finding(finding: Finding) -> str:
    """``file:line:col: rule in function: message`` and the quoted line, as a compiler prints them."""
    where = f" in {finding.function}" if finding.function else ""
    head = f"{finding.file}:{finding.line}:{finding.col + 1}: {finding.rule}{where}: {finding.message}"
    return f"{head}\n    {finding.source}" if finding.source else head


def main(args: argparse.Namespace) -> int:
    """``grader check``: print the static findings.  Findings are a report, not a failure (exit 0)."""
    root = Path(args.submission)
    if not root.exists():
        raise UserError(f"{root} does not exist")
    policy, wanted = _settings(args.rubric)
    if root.is_file():
        name = next((w for w in wanted if Path(w).name == root.name), root.name)
        files, root = {name: root}, root.parent
    else:
        files = find_student_files(root, wanted)
    if not files:
        raise UserError(f"no student files in {root} (looked for {', '.join(wanted)}, also without src/)")
    # Each file is judged under its rubric name (the policy's key), reported where it really is.
    shown = {rel_path: path.relative_to(root).as_posix() for rel_path, path in files.items()}
    findings = [dataclasses.replace(f, file=shown[f.file]) for f in analyze_files(files, policy)]
    if args.json:
        payload: dict[str, Any] = {
            "submission": str(args.submission),
            "files": sorted(shown.values()),
            "findings": [dataclasses.asdict(f) for f in findings],
        }
        print(json.dumps(payload, indent=2))
        return 0
    for finding in findings:
        print(format_finding(finding))
    checked = ", ".join(sorted(shown.values()))
    count = f"{len(findings)} finding{'s' if len(findings) != 1 else ''}" if findings else "no findings"
    print(f"{count} in {checked}")
    return 0
