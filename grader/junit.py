"""The matrix's junit.xml read back: each case's verdict, message and trace as the session recorded them.

The session (``grader.matrix.plugin``) writes them as JUnit properties (junit_family xunit1); a case
with no verdict is the grader's own ``error``, never the student's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import ParseError

from junitparser import JUnitXml, Properties, TestCase

from grader.errors import GraderError
from grader.results import Verdict


@dataclass(frozen=True)
class Case:
    """One matrix case as the junit file reports it (or as absent from it)."""

    id: str
    verdict: Verdict
    message: str = ""
    trace: dict[str, Any] | None = None


def read_junit(path: Path) -> dict[str, Case]:
    """Cases by id from a pytest junit.xml (xunit1: properties inside each testcase)."""
    try:
        xml = JUnitXml.fromfile(str(path))
    except (OSError, ParseError) as exc:
        raise GraderError(f"cannot read the matrix results {path}: {exc}") from exc
    suites = list(xml) if isinstance(xml, JUnitXml) else [xml]
    return {case.name: _case(case) for suite in suites for case in suite}


def _case(case: TestCase) -> Case:
    props = {p.name: p.value for props in case.iterchildren(Properties) for p in props}
    trace = None
    if props.get("trace"):
        try:
            trace = json.loads(props["trace"])
        except json.JSONDecodeError:
            trace = None  # checks on it then say no trace was recorded
    try:
        verdict = Verdict(props["verdict"])
    except (KeyError, ValueError):
        # No verdict means the matrix itself broke on this case: never the student's fault.
        detail = "; ".join(r.message or type(r).__name__ for r in case.result)
        return Case(case.name, Verdict.ERROR, f"no verdict recorded{': ' + detail if detail else ''}", trace)
    return Case(case.name, verdict, props.get("message") or "", trace)
