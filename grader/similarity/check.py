"""The similarity check of a class: compare, then write the CSV and the page (see ``grader.similarity``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from grader.batch.roster import Student, load_roster
from grader.errors import UserError
from grader.pack import AssignmentPack, load_pack
from grader.render.outputs import write_text
from grader.render.similarity import HTML_NAME, MAX_VIEWS, Nearest, Shared, render_csv, render_html, view_anchor
from grader.rubric import Rubric, load_rubric
from grader.similarity import COMMON, FLOOR, require

if TYPE_CHECKING:
    from grader.similarity.fingerprints import Fingerprint

CSV_NAME = "similarity.csv"


@dataclass(frozen=True)
class SimilarityReport:
    """Every pair that shares a fingerprint, highest first, and who could not be compared (and why)."""

    pairs: list[Shared]
    compared: list[str]
    problems: dict[str, str]
    floor: float

    @property
    def listed(self) -> list[Shared]:
        """The pairs at or above the floor: the CSV's rows and the page's."""
        return [pair for pair in self.pairs if pair.similarity >= self.floor]

    def nearest(self) -> dict[str, Nearest]:
        """Each compared student's highest pair (its view's anchor when the page shows one)."""
        found: dict[str, Nearest] = {}
        for rank, pair in enumerate(self.pairs, start=1):
            anchor = view_anchor(rank) if pair.similarity >= self.floor and rank <= MAX_VIEWS else ""
            for student, other in ((pair.student_a, pair.student_b), (pair.student_b, pair.student_a)):
                found.setdefault(student, Nearest(other, pair.similarity, anchor))
        return found


@dataclass(frozen=True)
class Fingerprinted:
    """One student's graded code fingerprinted, or why there is nothing of theirs to compare."""

    found: Fingerprint | None
    problem: str = ""


#: the problem of a student whose every fingerprint is the starter's or the boilerplate's
STARTER_ONLY = "nothing but the starter: no code of their own to compare"


def judged(found: Fingerprint) -> Fingerprinted:
    """A fingerprint, or the starter-only problem when nothing of it is the student's own."""
    return Fingerprinted(found) if found.positions else Fingerprinted(None, STARTER_ONLY)


def fingerprint_student(
    student: str, source: str, pack: AssignmentPack, rubric: Rubric, never: frozenset[int]
) -> Fingerprinted:
    """Take one student's graded code and fingerprint it, ``never`` (the starter's k-grams) left out: the
    one way a student is fingerprinted, on the client and on a Dask worker (``grader.similarity.remote``)."""
    from grader.similarity import extract, fingerprints

    taken = extract.take_graded_code(student, source, pack, rubric)
    if taken.problem:
        return Fingerprinted(None, taken.problem)
    return judged(
        fingerprints.fingerprint([f"# {_one_line(p.label)}\n{p.source.rstrip()}\n\n" for p in taken.pieces], never)
    )


def compare_class(
    students: Sequence[Student],
    pack: AssignmentPack,
    rubric: Rubric,
    boilerplate: Sequence[Path] = (),
    floor: float = FLOOR,
    common: int = COMMON,
    done: Mapping[str, Fingerprinted] | None = None,
) -> SimilarityReport:
    """Fingerprint every student once (but those ``done`` already, on the workers that graded them) and
    score the pairs that share code."""
    require()
    from grader.similarity import extract, fingerprints

    if not 0 <= floor <= 1:
        raise UserError("--floor is a similarity, between 0 and 1")
    if common < 2:
        raise UserError("--common must be at least 2: code two students share is what the check looks for")
    done = done or {}
    never: frozenset[int] = frozenset()
    if any(student.name not in done for student in students):
        never = fingerprints.never_evidence(piece.source for piece in extract.starter_code(pack, boilerplate))
    each = {
        s.name: done[s.name] if s.name in done else fingerprint_student(s.name, s.source, pack, rubric, never)
        for s in students
    }
    problems = {name: one.problem for name, one in each.items() if one.found is None}
    names = [name for name, one in each.items() if one.found is not None]
    found = [one.found for one in each.values() if one.found is not None]
    scored = fingerprints.similar_pairs(found, common)
    pairs = sorted(
        (
            Shared(
                names[p.a],
                names[p.b],
                round(p.similarity, 3),
                found[p.a].text,
                found[p.b].text,
                p.regions_a,
                p.regions_b,
                round(p.share_a, 3),
                round(p.share_b, 3),
            )
            for p in scored
            if p.similarity > 0
        ),
        key=lambda s: (-s.similarity, s.student_a, s.student_b),
    )
    return SimilarityReport(pairs, names, problems, floor)


def _one_line(label: str) -> str:
    return " ".join(label.split())


def write_report(report: SimilarityReport, out: Path, title: str) -> None:
    """``out/similarity.csv`` and ``out/similarity.html``, each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    notes = [f"{student}: {problem}" for student, problem in report.problems.items()]
    write_text(out / CSV_NAME, render_csv(report.listed))
    write_text(out / HTML_NAME, render_html(title, report.listed, report.floor, len(report.compared), notes))


def run_similarity(
    roster: Path,
    out: Path,
    pack_ref: str | None = None,
    rubric: Path | None = None,
    boilerplate: Sequence[Path] = (),
    floor: float = FLOOR,
    common: int = COMMON,
) -> SimilarityReport:
    """``grader similarity``: the roster as ``grader batch`` reads it, compared, and the report written."""
    loaded = load_rubric(rubric if rubric is not None or pack_ref is None else load_pack(pack_ref).rubric)
    pack = load_pack(pack_ref or loaded.assignment.pack)
    report = compare_class(load_roster(roster), pack, loaded, boilerplate, floor, common)
    write_report(report, Path(out), pack.title)
    return report


def main(args: argparse.Namespace) -> int:
    report = run_similarity(args.roster, args.out, args.pack, args.rubric, args.boilerplate, args.floor, args.common)
    print(f"{len(report.compared)} students compared, {len(report.listed)} pairs at or above {report.floor:.2f}")
    for student, problem in report.problems.items():
        print(f"not compared: {student}: {problem}")
    print(f"similarity: {Path(args.out) / CSV_NAME}, {Path(args.out) / HTML_NAME}")
    return 0
